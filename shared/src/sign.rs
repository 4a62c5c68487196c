//! sign
