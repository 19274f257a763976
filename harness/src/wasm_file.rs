//! Finding a built `.wasm` and refusing a stale one.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::HarnessError;

/// The environment variable naming the directory of built `.wasm` files.
pub const WASM_DIR_ENV: &str = "LIVECHECK_WASM_DIR";

/// The path of `<wasm_name>.wasm`, built from the package at `package_dir`, after checking it
/// is fresh (see [`fresh_wasm_in`]). It lives in `$LIVECHECK_WASM_DIR`, else
/// `<workspace>/target/wasm32-wasip1/release`.
pub fn fresh_wasm(package_dir: &Path, wasm_name: &str) -> Result<PathBuf, HarnessError> {
    let dir = wasm_dir(
        package_dir,
        std::env::var_os(WASM_DIR_ENV).map(PathBuf::from),
    );
    fresh_wasm_in(&dir, package_dir, wasm_name)
}

/// Where [`fresh_wasm`] looks: the directory the environment names, else the release directory
/// of the workspace that holds `package_dir` (the nearest ancestor with a `Cargo.lock`).
fn wasm_dir(package_dir: &Path, from_env: Option<PathBuf>) -> PathBuf {
    from_env.unwrap_or_else(|| workspace(package_dir).join("target/wasm32-wasip1/release"))
}

fn workspace(package_dir: &Path) -> &Path {
    package_dir
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(package_dir)
}

/// The path of `<dir>/<wasm_name>.wasm`, built from the package at `package_dir`. Fails, naming
/// the file and the command that builds it, when the file is missing or older than any source it
/// was built from (cargo's dep-info `<wasm_name>.d` beside it lists them; without one, every file
/// under the package's `src/`), its `Cargo.toml` or `build.rs`, or the workspace's `Cargo.lock`.
/// Files that only test builds read (`#[cfg(test)] mod tests;`) do not make a `.wasm` stale:
/// cargo rightly does not rebuild it for them.
pub fn fresh_wasm_in(
    dir: &Path,
    package_dir: &Path,
    wasm_name: &str,
) -> Result<PathBuf, HarnessError> {
    let wasm = dir.join(format!("{wasm_name}.wasm"));
    let package = package_name(package_dir).unwrap_or_else(|| wasm_name.replace('_', "-"));
    let how =
        format!("run `make wasm` or `cargo build --release --target wasm32-wasip1 -p {package}`");
    let built = fs::metadata(&wasm)
        .and_then(|m| m.modified())
        .map_err(|_| HarnessError::StaleWasm(format!("{} is missing: {how}", wasm.display())))?;
    let mut sources = vec![
        package_dir.join("Cargo.toml"),
        package_dir.join("build.rs"),
        workspace(package_dir).join("Cargo.lock"),
    ];
    match dep_info_sources(&dir.join(format!("{wasm_name}.d"))) {
        Some(listed) => sources.extend(listed),
        None => collect_files(&package_dir.join("src"), &mut sources),
    }
    let newer = sources
        .iter()
        .filter_map(|p| Some((p, fs::metadata(p).ok()?.modified().ok()?)))
        .filter(|(_, t)| *t > built)
        .max_by_key(|(_, t)| *t);
    if let Some((source, _)) = newer {
        return Err(HarnessError::StaleWasm(format!(
            "{} is older than {}: {how}",
            wasm.display(),
            source.display()
        )));
    }
    Ok(wasm)
}

/// Like [`fresh_wasm`], and reads the file.
pub fn read_fresh_wasm(package_dir: &Path, wasm_name: &str) -> Result<Vec<u8>, HarnessError> {
    let path = fresh_wasm(package_dir, wasm_name)?;
    fs::read(&path).map_err(|e| HarnessError::StaleWasm(format!("{}: {e}", path.display())))
}

/// The sources cargo's dep-info file lists for the artifact (`target: a.rs b\\ c.rs ...`), less
/// git metadata (the build script reads it only to stamp the commit into the banner).
fn dep_info_sources(dep_info: &Path) -> Option<Vec<PathBuf>> {
    let text = fs::read_to_string(dep_info).ok()?;
    let line = text.lines().next()?;
    let (_, deps) = line.split_once(": ")?;
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' => out.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    out.push(current);
    Some(
        out.into_iter()
            .filter(|p| !p.is_empty() && !p.contains("/.git/"))
            .map(PathBuf::from)
            .collect(),
    )
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn package_name(package_dir: &Path) -> Option<String> {
    let manifest = fs::read_to_string(package_dir.join("Cargo.toml")).ok()?;
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(rest) = line.strip_prefix("name") {
                let value = rest.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_directory_else_the_workspace_release_dir() {
        let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
        let workspace = harness.parent().unwrap();
        assert_eq!(
            wasm_dir(harness, None),
            workspace.join("target/wasm32-wasip1/release")
        );
        assert_eq!(
            wasm_dir(harness, Some(PathBuf::from("/elsewhere"))),
            PathBuf::from("/elsewhere")
        );
    }
}
