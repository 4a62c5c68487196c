//! Property tests for every decoder of outside input: frames and messages,
//! signed units, link files and invite codes. Arbitrary bytes and damaged
//! valid inputs must give an error, never a panic, and valid inputs must
//! round-trip. Case counts are bounded for CI (`PROPTEST_CASES` raises them).

use crate::codec::{self, CodecError, PROTOCOL_VERSION};
use crate::extract::LinkTag;
use crate::invite::{Invite, InviteError};
use crate::limits::MAX_UNIT_BYTES;
use crate::linkfile::{self, LinkFileHeader, LinkRecord, ScanSummary, LINK_FILE_VERSION};
use crate::proto::{HostInfo, Request, Response};
use crate::scope::Scope;
use crate::sign::{self, SignedUnit, UnitLimits, WorkUnit};
use proptest::prelude::*;

/// Cases per property in CI.
const CASES: u32 = 128;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(CASES),
        ..ProptestConfig::default()
    }
}

fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9:/._\\-é ]{0,40}").expect("regex")
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::Challenge),
        (
            proptest::collection::vec(any::<u8>(), 0..40),
            any::<[u8; 32]>(),
            text(),
            proptest::collection::vec(any::<u8>(), 0..80)
        )
            .prop_map(|(token, host_key, name, proof)| Request::Enrol {
                token,
                host_key,
                host_info: HostInfo {
                    name,
                    ..HostInfo::default()
                },
                proof
            }),
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..80))
            .prop_map(|(host_id, proof)| Request::Hello { host_id, proof }),
        (
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec(any::<u64>(), 0..20)
        )
            .prop_map(
                |(want_seconds, free_slots, units_held)| Request::RequestWork {
                    want_seconds,
                    free_slots,
                    units_held,
                    open_windows: None,
                }
            ),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(unit_id, pages, links)| {
            Request::Progress {
                unit_id,
                pages,
                links,
            }
        }),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(unit_id, pages, link_file)| Request::Upload {
                unit_id,
                summary: ScanSummary {
                    pages,
                    ..ScanSummary::default()
                },
                link_file,
                state: None,
            }),
        (any::<u64>(), text()).prop_map(|(unit_id, reason)| Request::Fail { unit_id, reason }),
    ]
}

fn unit(id: u64, site: String) -> WorkUnit {
    WorkUnit {
        unit_id: id,
        round_id: 2,
        job_id: 3,
        host_id: 4,
        seed_url: format!("http://{site}/"),
        site,
        scope: Scope::Host,
        limits: UnitLimits {
            max_pages: 10,
            max_depth: 3,
            delay_ms: 0,
            max_page_bytes: 1000,
            max_seconds: 60,
            max_crawl_delay_ms: 5000,
        },
        issued_ms: 1,
        deadline_ms: 2,
        user_agent: "BeeBot".into(),
        resume: None,
        exclusions: Vec::new(),
    }
}

fn records() -> impl Strategy<Value = Vec<LinkRecord>> {
    proptest::collection::vec(
        (text(), text(), any::<bool>()).prop_map(|(s, t, nofollow)| LinkRecord {
            source_url: format!("http://a.test/{s}"),
            target_url: format!("http://b.test/{t}"),
            tag: LinkTag::A,
            nofollow,
            anchor_text: s,
        }),
        0..30,
    )
}

fn header(n: usize) -> LinkFileHeader {
    LinkFileHeader {
        format_version: LINK_FILE_VERSION,
        round_id: 1,
        unit_id: 2,
        site: "a.test".into(),
        pages: 3,
        records: n as u64,
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn frames_of_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = codec::decode_frame::<Request>(&bytes);
        let _ = codec::decode_frame::<Response>(&bytes);
        let _ = codec::decode_payload::<Request>(&bytes);
    }

    #[test]
    fn messages_round_trip_and_damage_is_an_error(req in request(), at in any::<usize>(), bit in 0u8..8) {
        let frame = codec::encode_frame(&req).expect("encode");
        prop_assert_eq!(&codec::decode_frame::<Request>(&frame).expect("decode"), &req);
        // Cut anywhere: an error.
        let cut = at % frame.len();
        prop_assert!(codec::decode_frame::<Request>(&frame[..cut]).is_err());
        // One bit flipped: an error or some other valid message, never a panic.
        let mut bad = frame.clone();
        let i = at % bad.len();
        bad[i] ^= 1 << bit;
        let _ = codec::decode_frame::<Request>(&bad);
        // Any other version: the upgrade error, before the body is read.
        let mut old = frame;
        old[4..6].copy_from_slice(&(PROTOCOL_VERSION ^ (1 + bit as u16)).to_le_bytes());
        let is_version_error = matches!(
            codec::decode_frame::<Request>(&old),
            Err(CodecError::Version { .. })
        );
        prop_assert!(is_version_error);
    }

    #[test]
    fn signed_units_refuse_every_damage(site in "[a-z]{1,20}\\.test", at in any::<usize>(), bit in 0u8..8) {
        let key = sign::generate_key();
        let signed = sign::sign_unit(&key, &unit(7, site.clone())).expect("sign");
        prop_assert_eq!(sign::verify_unit(&key.verifying_key(), &signed).expect("verify"), unit(7, site));
        let mut bytes = signed.bytes.clone();
        let i = at % bytes.len();
        bytes[i] ^= 1 << bit;
        let tampered = SignedUnit { bytes, signature: signed.signature.clone() };
        prop_assert!(sign::verify_unit(&key.verifying_key(), &tampered).is_err());
        let mut sig = signed.signature.clone();
        let i = at % sig.len();
        sig[i] ^= 1 << bit;
        let forged = SignedUnit { bytes: signed.bytes.clone(), signature: sig };
        prop_assert!(sign::verify_unit(&key.verifying_key(), &forged).is_err());
        let other = sign::generate_key();
        prop_assert!(sign::verify_unit(&other.verifying_key(), &signed).is_err());
    }

    #[test]
    fn signed_units_of_arbitrary_bytes_never_verify(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        signature in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let key = sign::generate_key();
        let s = SignedUnit { bytes: bytes.clone(), signature };
        prop_assert!(sign::verify_unit(&key.verifying_key(), &s).is_err());
        let _ = codec::decode::<SignedUnit>(&bytes, MAX_UNIT_BYTES * 2);
    }

    #[test]
    fn link_files_round_trip_and_refuse_damage(recs in records(), at in any::<usize>(), bit in 0u8..8) {
        let bytes = linkfile::encode(&header(recs.len()), &recs).expect("encode");
        let (h, r) = linkfile::decode(&bytes).expect("decode");
        prop_assert_eq!(h, header(recs.len()));
        prop_assert_eq!(&r, &recs);
        // zstd's checksum (or the frame structure) catches any flipped bit
        // that changes the content; a bit the content does not depend on (a
        // frame-header flag, the window size) may pass, with the same content.
        let mut bad = bytes.clone();
        let i = at % bad.len();
        bad[i] ^= 1 << bit;
        if let Ok((h2, r2)) = linkfile::decode(&bad) {
            prop_assert_eq!(h2, header(recs.len()));
            prop_assert_eq!(&r2, &recs);
        }
        let cut = at % bytes.len();
        prop_assert!(linkfile::decode(&bytes[..cut]).is_err());
    }

    #[test]
    fn link_files_of_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(linkfile::decode(&bytes).is_err() || bytes.len() > 12);
        let mut framed = vec![0x28, 0xb5, 0x2f, 0xfd];
        framed.extend_from_slice(&bytes);
        let _ = linkfile::decode(&framed);
    }

    #[test]
    fn invite_codes_round_trip_and_damage_is_an_error(
        token in proptest::collection::vec(any::<u8>(), 1..40),
        port in any::<u16>(),
        at in any::<usize>(),
        junk in "[ -~]{0,80}",
    ) {
        let inv = Invite {
            addr: format!("127.0.0.1:{port}"),
            server_name: "localhost".into(),
            cert_sha256: [3; 32],
            project_key: [4; 32],
            token,
            expires_ms: 5,
        };
        let code = inv.to_code();
        prop_assert_eq!(Invite::from_code(&code).expect("decode"), inv);
        // Cut off: damaged, unless nothing of the prefix is left.
        let cut = at % code.len();
        let want = if cut == 0 { InviteError::Prefix } else { InviteError::Damaged };
        prop_assert_eq!(Invite::from_code(&code[..cut]), Err(want));
        prop_assert!(Invite::from_code(&junk).is_err(), "{}", junk);
        prop_assert_eq!(
            Invite::from_code(&format!("beebot1-{junk}")),
            Err(InviteError::Damaged)
        );
        prop_assert_eq!(
            Invite::from_code(&format!("beebot2-{junk}")),
            Err(InviteError::Damaged)
        );
    }

    /// A code copied with one character changed, one missing or its tail cut
    /// off is refused as damaged: never another invite, never "expired".
    #[test]
    fn a_damaged_invite_code_is_refused_as_damaged(
        token in proptest::collection::vec(any::<u8>(), 1..40),
        addr in "[a-z0-9.]{1,30}:[0-9]{1,5}",
        key in any::<[u8; 32]>(),
        expires_ms in any::<u64>(),
        at in any::<usize>(),
        with in prop_oneof![
            proptest::char::range('!', '~'),
            Just(' '),
            Just('\t'),
            Just('é'),
            Just('€'),
            any::<char>(),
        ],
    ) {
        let inv = Invite {
            addr,
            server_name: "grid.example".into(),
            cert_sha256: [7; 32],
            project_key: key,
            token,
            expires_ms,
        };
        let code = inv.to_code();
        let chars: Vec<char> = code.chars().collect();
        let i = at % chars.len();
        let damaged = |s: &str| {
            let e = Invite::from_code(s).expect_err(s);
            prop_assert_eq!(e, InviteError::Damaged, "{}", s);
            Ok(())
        };
        if chars[i] != with {
            let mut changed = chars.clone();
            changed[i] = with;
            damaged(&changed.iter().collect::<String>())?;
        }
        let mut missing = chars.clone();
        missing.remove(i);
        damaged(&missing.iter().collect::<String>())?;
        if i > 0 {
            damaged(&code[..i])?;
        }
    }
}
