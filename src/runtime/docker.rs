//! The Docker implementation of [`Runtime`](super::Runtime) (placeholder).
