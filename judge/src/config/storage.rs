//! Where results are stored (`[store]`): a SQLite file (by default beside the config file) or a
//! PostgreSQL URL, which comes from an env var when it carries a password; and how long results
//! are kept.

use std::path::Path;
use std::time::Duration;

use reqwest::Url;

use super::file::RawStore;
use super::secret::{secret_from, Secret};

/// Where results are stored.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `sqlite://…` (an absolute path, created on start) or `postgres://…`; may carry a password.
    pub url: Secret,
    pub retention: Duration,
}

/// The SQLite file used when the config names no store, beside the config file.
pub const DEFAULT_SQLITE_FILE: &str = "livecheck-judge.sqlite";
const DEFAULT_RETENTION_DAYS: u32 = 30;
const MAX_RETENTION_DAYS: u32 = 3650;

pub(super) fn compile_store(
    raw: RawStore,
    env: &dyn Fn(&str) -> Option<String>,
    base: &Path,
    problems: &mut Vec<String>,
) -> Option<StoreSettings> {
    let retention_days = raw.retention_days.unwrap_or(DEFAULT_RETENTION_DAYS);
    if !(1..=MAX_RETENTION_DAYS).contains(&retention_days) {
        problems.push(format!(
            "store: retention_days must be between 1 and {MAX_RETENTION_DAYS}, not {retention_days}"
        ));
    }
    let url = match (raw.url, raw.url_env) {
        (Some(_), Some(_)) => {
            problems.push("store: give url or url_env, not both".to_owned());
            return None;
        }
        (None, Some(var)) => secret_from(env, &var, "store: url_env", problems)?.0,
        (Some(url), None) => {
            if url.starts_with("postgres") && has_password(&url) {
                problems.push(
                    "store: url carries a password; put the URL in an env var named by url_env"
                        .to_owned(),
                );
                return None;
            }
            url
        }
        (None, None) => format!("sqlite://{DEFAULT_SQLITE_FILE}"),
    };
    let url = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        url
    } else if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            problems.push("store: a sqlite url needs a file path".to_owned());
            return None;
        }
        let path = base.join(path);
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir().unwrap_or_default().join(path)
        };
        format!("sqlite://{}", path.display())
    } else {
        problems.push("store: url must start with sqlite:// or postgres://".to_owned());
        return None;
    };
    Some(StoreSettings {
        url: Secret(url),
        retention: Duration::from_secs(u64::from(retention_days) * 86_400),
    })
}

fn has_password(url: &str) -> bool {
    Url::parse(url).is_ok_and(|u| u.password().is_some())
}
