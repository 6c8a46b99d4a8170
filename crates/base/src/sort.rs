//! Sorting with one copy of the sort code in the binary.
//!
//! The standard library's sorts are generic over the element and the comparison, so
//! every `v.sort_by(…)` in the kubelet compiled its own copy of the sort: about 3 KiB
//! of code each, 230 KiB for the kubelet's ~80 sorts, on boards whose flash and page
//! cache hold every byte. Here the standard stable sort runs once, over positions
//! (`usize`) compared through a `dyn` closure, and the slice is then put in that order
//! by swaps. The results are those of `slice::sort_by` (stable); the cost, a vector of
//! positions and a call through a pointer per comparison, does not show at the sizes
//! a node sorts (its pods, containers, images, metric series). `clippy.toml` turns the
//! slice methods away, so new code comes here. `collect()` into a `BTreeMap` or
//! `BTreeSet` sorts too (a vector of the items, before building the tree); [`map`] and
//! [`set`] insert instead, for the places that build one often from an iterator.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// `v` in ascending order, as `slice::sort` (stable).
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// `v` in the order of `key`, as `slice::sort_by_key` (stable).
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// `v` in the order `cmp` gives, as `slice::sort_by` (stable).
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..v.len()).collect();
    {
        let v = &*v;
        sort_positions(&mut order, &mut |a, b| cmp(&v[a], &v[b]));
    }
    permute(v, &mut order);
}

/// `pairs` as an ordered map, as `collect()` makes it (a repeated key keeps its last
/// value), by inserting each: `collect` into a `BTreeMap` sorts a vector of the pairs
/// first, with its own copy of the sort for each pair type.
pub fn map<K: Ord, V>(pairs: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut m = BTreeMap::new();
    m.extend(pairs);
    m
}

/// `items` as an ordered set, as `collect()` makes it, by inserting each (see [`map`]).
pub fn set<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut s = BTreeSet::new();
    s.extend(items);
    s
}

/// The one instance of the standard sort.
#[inline(never)]
fn sort_positions(order: &mut [usize], cmp: &mut dyn FnMut(usize, usize) -> Ordering) {
    #[allow(clippy::disallowed_methods)] // the one place that sorts
    order.sort_by(|&a, &b| cmp(a, b));
}

/// Puts `v` in `order`: afterwards `v[i]` is what was at `order[i]`. Follows each
/// cycle of the permutation once (marking a done position by pointing it at
/// itself), so every element moves once.
fn permute<T>(v: &mut [T], order: &mut [usize]) {
    for start in 0..order.len() {
        let mut at = start;
        loop {
            let from = order[at];
            order[at] = at;
            if from == start {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator: the tests need no `rand`.
    fn values(n: usize, seed: u64) -> Vec<(u8, usize)> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Few distinct keys, so stability is tested; the position tells them apart.
                ((x % 7) as u8, i)
            })
            .collect()
    }

    #[test]
    fn sort_by_key_matches_the_standard_stable_sort() {
        for n in [0, 1, 2, 3, 10, 33, 100, 1000] {
            for seed in 1..6 {
                let mut ours = values(n, seed);
                let mut std = ours.clone();
                sort_by_key(&mut ours, |a| a.0);
                #[allow(clippy::disallowed_methods)]
                std.sort_by_key(|a| a.0);
                assert_eq!(ours, std, "n={n} seed={seed}");
            }
        }
    }

    #[test]
    fn sort_and_sort_by_key_order_as_std() {
        let mut v = vec!["kube-proxy", "coredns", "etcd", "apiserver", "coredns"];
        sort(&mut v);
        assert_eq!(v, ["apiserver", "coredns", "coredns", "etcd", "kube-proxy"]);
        let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd')];
        sort_by_key(&mut v, |p| std::cmp::Reverse(p.0));
        assert_eq!(v, [(3, 'a'), (3, 'c'), (1, 'b'), (0, 'd')]);
    }

    #[test]
    fn map_and_set_collect_as_collect_does() {
        let pairs = [("b", 1), ("a", 2), ("b", 3)];
        let want: BTreeMap<_, _> = pairs.into_iter().collect();
        assert_eq!(map(pairs), want);
        assert_eq!(map(pairs)["b"], 3, "the last value of a repeated key");
        let items = ["x", "a", "x", "m"];
        let want: BTreeSet<_> = items.into_iter().collect();
        assert_eq!(set(items), want);
    }

    #[test]
    fn permute_follows_every_cycle() {
        // Two cycles (0 2 4) and (1 3), and a fixed point 5.
        let mut v = ['a', 'b', 'c', 'd', 'e', 'f'];
        let mut order = [2, 3, 4, 1, 0, 5];
        permute(&mut v, &mut order);
        assert_eq!(v, ['c', 'd', 'e', 'b', 'a', 'f']);
    }

    #[test]
    fn owned_elements_move_without_loss() {
        let mut v: Vec<String> = (0..50).rev().map(|i| format!("pod-{i:02}")).collect();
        sort(&mut v);
        let want: Vec<String> = (0..50).map(|i| format!("pod-{i:02}")).collect();
        assert_eq!(v, want);
    }
}
