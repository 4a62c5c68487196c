//! The one wire and storage codec (bincode 2 over serde), with hard size limits.
//!
//! A frame is `[u32 LE payload length][payload]`, the payload `[u16 LE protocol
//! version][bincode body]`. The length is checked against the limit before
//! anything is allocated, and the version is read before the body, so a client
//! speaking another version gets a clear "upgrade" answer instead of a decode error.
//!
//! Byte fields (a link file, a unit's signed bytes, a scan state) go through
//! `codec::bytes`: one run of bytes, the same on the wire as a plain `Vec<u8>`,
//! borrowed from the frame when decoded and copied once. A claimed length past
//! the frame is refused before anything is allocated for it.

use serde::{de::DeserializeOwned, Serialize};

use crate::limits::MAX_FRAME_BYTES;

/// The protocol version this build speaks. Bump on any incompatible change.
/// 4: work units carry the excluded hosts inside their scope.
pub const PROTOCOL_VERSION: u16 = 4;

/// Bytes of the frame length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Limit of one bincode decode: no single decode may allocate more than a frame.
const DECODE_LIMIT: usize = MAX_FRAME_BYTES;

/// Failures of encoding or decoding.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("frame of {got} bytes exceeds the limit of {limit} bytes")]
    TooLarge { got: usize, limit: usize },
    #[error(
        "peer speaks protocol version {got}, this build speaks {want}: upgrade the older side"
    )]
    Version { got: u16, want: u16 },
    #[error("truncated frame")]
    Truncated,
    #[error("malformed message: {0}")]
    Decode(String),
    #[error("cannot encode message: {0}")]
    Encode(String),
    #[error("{0} trailing bytes after message")]
    Trailing(usize),
}

/// Limit of a decode asked to read more than a frame (a link file): bincode
/// counts the decoded values' in-memory size, which for link records is up to
/// about twice their encoded size.
const LARGE_DECODE_LIMIT: usize = 2 * crate::limits::MAX_LINK_FILE_DECOMPRESSED_BYTES;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

fn large_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<LARGE_DECODE_LIMIT>()
}

/// `#[serde(with = "crate::codec::bytes")]` for a `Vec<u8>` field: the same
/// bytes on the wire as the plain field (bincode writes a length, then the
/// bytes; JSON an array of numbers), but encoded and decoded as one run of
/// bytes instead of a value per byte. Decoded from a slice (every decode
/// of [`decode`]), the run is borrowed from the input and copied once: a
/// claimed length past the bytes there are is refused before anything is
/// allocated for it. (`deserialize_byte_buf` would allocate the claimed
/// length, up to the decode's limit, before finding the input short.)
pub mod bytes {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_bytes(Bytes)
    }

    struct Bytes;

    impl<'de> de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        /// JSON (and any format without a bytes type) gives a sequence.
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // As serde's own `Vec<u8>`: a claimed size preallocates at most 1 MiB.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }

    /// [`self`] for an `Option<Vec<u8>>` field.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        #[derive(Deserialize)]
        #[serde(transparent)]
        struct Run(#[serde(with = "super")] Vec<u8>);

        #[derive(Serialize)]
        #[serde(transparent)]
        struct RunRef<'a>(#[serde(with = "super")] &'a [u8]);

        pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            v.as_deref().map(RunRef).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            Ok(Option::<Run>::deserialize(d)?.map(|r| r.0))
        }
    }
}

/// Encode a value with the standard configuration. Fails when the result would
/// exceed `limit` bytes.
pub fn encode<T: Serialize>(value: &T, limit: usize) -> Result<Vec<u8>, CodecError> {
    let bytes = bincode::serde::encode_to_vec(value, config())
        .map_err(|e| CodecError::Encode(e.to_string()))?;
    if bytes.len() > limit {
        return Err(CodecError::TooLarge {
            got: bytes.len(),
            limit,
        });
    }
    Ok(bytes)
}

/// Decode a value that must use every byte of `bytes`, which may be at most `limit` long.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], limit: usize) -> Result<T, CodecError> {
    if bytes.len() > limit {
        return Err(CodecError::TooLarge {
            got: bytes.len(),
            limit,
        });
    }
    let decoded = if limit > DECODE_LIMIT {
        bincode::serde::decode_from_slice(bytes, large_config())
    } else {
        bincode::serde::decode_from_slice(bytes, config())
    };
    let (value, used) = decoded.map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - used));
    }
    Ok(value)
}

/// Encode a message as one frame: length prefix, protocol version, body.
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, CodecError> {
    let body = encode(msg, MAX_FRAME_BYTES - 2)?;
    let payload_len = body.len() + 2;
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload_len);
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Read the payload length from a frame header and check it against `limit`
/// before the caller allocates anything.
pub fn frame_len(header: [u8; FRAME_HEADER_BYTES], limit: usize) -> Result<usize, CodecError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > limit {
        return Err(CodecError::TooLarge { got: len, limit });
    }
    if len < 2 {
        return Err(CodecError::Truncated);
    }
    Ok(len)
}

/// The protocol version a payload claims, read before its body.
pub fn payload_version(payload: &[u8]) -> Result<u16, CodecError> {
    match payload {
        [a, b, ..] => Ok(u16::from_le_bytes([*a, *b])),
        _ => Err(CodecError::Truncated),
    }
}

/// Decode a frame payload (without the length prefix): version first, then body.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CodecError> {
    let version = payload_version(payload)?;
    if version != PROTOCOL_VERSION {
        return Err(CodecError::Version {
            got: version,
            want: PROTOCOL_VERSION,
        });
    }
    decode(&payload[2..], MAX_FRAME_BYTES)
}

/// Decode a whole frame held in memory (length prefix included).
pub fn decode_frame<T: DeserializeOwned>(frame: &[u8]) -> Result<T, CodecError> {
    if frame.len() < FRAME_HEADER_BYTES {
        return Err(CodecError::Truncated);
    }
    let mut header = [0u8; FRAME_HEADER_BYTES];
    header.copy_from_slice(&frame[..FRAME_HEADER_BYTES]);
    let len = frame_len(header, MAX_FRAME_BYTES)?;
    let payload = &frame[FRAME_HEADER_BYTES..];
    if payload.len() != len {
        return Err(CodecError::Truncated);
    }
    decode_payload(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Msg {
        a: u32,
        b: String,
    }

    #[test]
    fn frame_round_trip() {
        let m = Msg {
            a: 7,
            b: "hi".into(),
        };
        let f = encode_frame(&m).unwrap();
        assert_eq!(decode_frame::<Msg>(&f).unwrap(), m);
    }

    #[test]
    fn oversized_length_refused_before_allocation() {
        let header = (u32::MAX).to_le_bytes();
        assert!(matches!(
            frame_len(header, MAX_FRAME_BYTES),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn other_version_is_an_upgrade_error() {
        let m = Msg {
            a: 1,
            b: String::new(),
        };
        let mut f = encode_frame(&m).unwrap();
        f[4] = 99;
        f[5] = 0;
        assert!(matches!(
            decode_frame::<Msg>(&f),
            Err(CodecError::Version { got: 99, .. })
        ));
    }

    #[test]
    fn large_limits_decode_what_a_frame_limit_refuses() {
        // 8 million small numbers: 8 MB encoded, 64 MB in memory (more
        // than a frame may hold, now that frames carry a scan state too).
        let v: Vec<u64> = vec![7; 8_000_000];
        let bytes = encode(&v, usize::MAX).unwrap();
        assert!(decode::<Vec<u64>>(&bytes, MAX_FRAME_BYTES).is_err());
        let back: Vec<u64> = decode(&bytes, 256 * 1024 * 1024).unwrap();
        assert_eq!(back.len(), v.len());
    }

    #[test]
    fn trailing_bytes_refused() {
        let bytes = encode(&5u32, 100).unwrap();
        let mut more = bytes.clone();
        more.push(0);
        assert!(matches!(
            decode::<u32>(&more, 100),
            Err(CodecError::Trailing(1))
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for len in 0..64u8 {
            let junk: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            let _ = decode::<Msg>(&junk, 1000);
            let _ = decode_frame::<Msg>(&junk);
        }
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Plain {
        a: Vec<u8>,
        b: Option<Vec<u8>>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Runs {
        #[serde(with = "bytes")]
        a: Vec<u8>,
        #[serde(with = "bytes::option")]
        b: Option<Vec<u8>>,
    }

    #[test]
    fn byte_runs_are_the_same_on_the_wire_and_in_json_as_byte_vectors() {
        let long: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        for (a, b) in [
            (long.clone(), Some(long.clone())),
            (vec![], None),
            (vec![0, 255], Some(vec![])),
        ] {
            let plain = Plain {
                a: a.clone(),
                b: b.clone(),
            };
            let runs = Runs { a, b };
            let wire = encode(&plain, usize::MAX).unwrap();
            assert_eq!(encode(&runs, usize::MAX).unwrap(), wire);
            assert_eq!(decode::<Runs>(&wire, MAX_FRAME_BYTES).unwrap(), runs);
            let back: Plain = decode(&encode(&runs, usize::MAX).unwrap(), MAX_FRAME_BYTES).unwrap();
            assert_eq!(back, plain);
            let json = serde_json::to_string(&plain).unwrap();
            assert_eq!(serde_json::to_string(&runs).unwrap(), json);
            assert_eq!(serde_json::from_str::<Runs>(&json).unwrap(), runs);
        }
    }

    #[test]
    fn a_byte_run_claiming_more_than_the_frame_holds_is_refused() {
        // A length of 2^40 bytes (bincode's varint: 253, then 8 bytes),
        // followed by nothing.
        let mut lie = vec![253u8];
        lie.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            decode::<Runs>(&lie, MAX_FRAME_BYTES),
            Err(CodecError::Decode(_))
        ));
        // Within the limit but past the end: truncated, not read past.
        let mut short = vec![100u8];
        short.extend_from_slice(&[1, 2, 3]);
        assert!(decode::<Runs>(&short, MAX_FRAME_BYTES).is_err());
        // 40 MiB claimed (under the frame limit) by a frame of a few bytes,
        // in the plain run and in the optional one: refused. (That nothing of
        // the claimed size is allocated rests on bincode borrowing the run
        // from the slice, which checks the length first; no test here can
        // count allocations, `unsafe` being forbidden.)
        let claim = 40u32 << 20;
        assert!((claim as usize) < MAX_FRAME_BYTES);
        for head in [vec![252u8], vec![0, 1, 252]] {
            let mut lie = head;
            lie.extend_from_slice(&claim.to_le_bytes());
            lie.extend_from_slice(&[1, 2, 3]);
            assert!(matches!(
                decode::<Runs>(&lie, MAX_FRAME_BYTES),
                Err(CodecError::Decode(_))
            ));
        }
    }
}
