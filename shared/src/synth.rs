//! Synthetic web (stub: to be written).
