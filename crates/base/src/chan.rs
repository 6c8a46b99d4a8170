//! Channels bounded by a count of messages, whose memory is taken as they fill.
//!
//! `crossbeam_channel::bounded(n)` allocates its n slots when it is made and writes
//! every slot's stamp, so each of the kubelet's large queues (the PLEG's 1000 events,
//! upstream's `plegChannelCapacity`; 1024 probe runs per lane; 1024 pod kills …) was
//! resident from start-up on, however idle the node: ~0.5 MiB of an idle node's heap
//! for queues that hold a message or two. [`bounded`] gives the same bound over
//! crossbeam's unbounded (linked blocks of 31 slots, made and freed as messages come
//! and go); the receiver is crossbeam's own, so `select!` and `recv_timeout` work on
//! it unchanged.
//!
//! The bound is checked before the send, so senders racing at the very edge may put
//! it over by at most their number less one; nothing here waits for room (every user
//! of these queues sheds or reports a full queue: `try_send` is the only send).

use crossbeam_channel::{Receiver, Sender, TrySendError};

/// The sending side of a [`bounded`] channel.
#[derive(Debug)]
pub struct BoundedSender<T> {
    tx: Sender<T>,
    cap: usize,
}

// Derived `Clone` would ask `T: Clone`.
impl<T> Clone for BoundedSender<T> {
    fn clone(&self) -> Self {
        BoundedSender {
            tx: self.tx.clone(),
            cap: self.cap,
        }
    }
}

/// A channel holding at most `cap` messages, allocated as used.
pub fn bounded<T>(cap: usize) -> (BoundedSender<T>, Receiver<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (BoundedSender { tx, cap }, rx)
}

impl<T> BoundedSender<T> {
    /// Queues `msg` unless `cap` messages wait already (`Full`) or every receiver is
    /// gone (`Disconnected`), as crossbeam's `try_send` on a bounded channel.
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        if self.tx.len() >= self.cap {
            return Err(TrySendError::Full(msg));
        }
        self.tx.try_send(msg)
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    /// True when no message waits.
    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_at_the_bound_and_room_again_after_a_receive() {
        let (tx, rx) = bounded(2);
        assert!(tx.try_send(1).is_ok());
        assert!(tx.clone().try_send(2).is_ok());
        assert_eq!(tx.len(), 2);
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(rx.recv().ok(), Some(1));
        assert!(tx.try_send(4).is_ok());
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [2, 4]);
        assert!(tx.is_empty());
        drop(rx);
        assert!(matches!(tx.try_send(5), Err(TrySendError::Disconnected(5))));
    }

    #[test]
    fn a_zero_bound_takes_nothing() {
        let (tx, _rx) = bounded(0);
        assert!(matches!(tx.try_send(()), Err(TrySendError::Full(()))));
    }
}
