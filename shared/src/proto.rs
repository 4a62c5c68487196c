//! proto
