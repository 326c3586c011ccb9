//! Random tokens and the hashes they are stored as (the operator's token, agent tokens).
use sha2::Digest;

/// 32 random bytes as hex.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A token's SHA-256 as hex: what the store keeps of an agent token.
pub fn hex_sha256(s: &str) -> String {
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
