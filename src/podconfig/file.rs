//! The file source (placeholder).
