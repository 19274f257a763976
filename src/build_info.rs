//! What this build is: logged once per VM so operators can tell which filter Envoy loaded.

/// The crate version, from Cargo.toml.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the filter was built from (`-dirty` when the tree had uncommitted changes).
pub const GIT_HASH: &str = env!("LIVECHECK_GIT_HASH");

/// The line logged on VM start: `livecheck 0.1.0 (git 0123456789ab)`.
pub fn banner() -> String {
    format!("livecheck {VERSION} (git {GIT_HASH})")
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn banner_names_version_and_commit() {
        let b = banner();
        assert!(b.starts_with("livecheck "), "{b}");
        assert!(b.contains(VERSION));
        assert!(b.contains(&format!("(git {GIT_HASH})")));
    }

    #[test]
    fn usize_is_what_the_target_says() {
        // Pins that these tests really run on the target they claim: 32-bit on wasm.
        let expected = if cfg!(target_pointer_width = "32") {
            4
        } else {
            8
        };
        assert_eq!(std::mem::size_of::<usize>(), expected);
    }
}
