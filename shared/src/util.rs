//! Small helpers shared by both sides: text clean-up and hashing.

use sha2::{Digest, Sha256};

/// Collapse runs of whitespace to one space, trim, and cap at `max_chars` characters.
pub fn collapse_whitespace(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut count = 0usize;
    let mut pending_space = false;
    for ch in text.chars() {
        if ch.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            if count + 1 >= max_chars {
                break;
            }
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        if count >= max_chars {
            break;
        }
        out.push(ch);
        count += 1;
    }
    out
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapses_and_caps() {
        assert_eq!(collapse_whitespace("  a \n\t b  ", 128), "a b");
        assert_eq!(collapse_whitespace("abcdef", 3), "abc");
        assert_eq!(collapse_whitespace("ab cd", 3), "ab");
        assert_eq!(collapse_whitespace("", 3), "");
        let long = "x".repeat(500);
        assert_eq!(collapse_whitespace(&long, 128).chars().count(), 128);
    }
}
