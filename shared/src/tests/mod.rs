//! Tests across the crate's decoders and link extraction: the property
//! tests of every decoder of outside input (`decoders`) and the
//! conformance cases of link extraction (`conformance`). Unit tests of one
//! module sit beside it.

mod conformance;
mod decoders;
