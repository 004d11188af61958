//! Helpers shared by the integration tests.

/// Deterministic corruptions of a file's bytes for no-panic tests: truncations at
/// many lengths, and single-byte replacements by characters that break tokens
/// and numbers. `count` bounds how many of each kind are produced.
pub fn corruptions(bytes: &[u8], count: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let n = bytes.len();
    if n == 0 {
        return out;
    }
    let step = (n / count.max(1)).max(1);
    for cut in (0..n).step_by(step) {
        out.push(bytes[..cut].to_vec());
    }
    // xorshift: reproducible without a dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let replacements = b"()9-;{}x.\n \0e+";
    for _ in 0..count {
        let mut m = bytes.to_vec();
        let at = (next() % n as u64) as usize;
        m[at] = replacements[(next() % replacements.len() as u64) as usize];
        out.push(m);
    }
    out
}
