//! See `first_hour.rs`.
