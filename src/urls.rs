//! The URLs a client is given: which schemes it speaks, what to write instead of one it does
//! not, and how a URL is shown without its password.

use crate::error::{Error, Result};

/// Checks a list of node URLs: not empty, all of one scheme that ferrisson speaks.
pub(crate) fn check_urls(what: &str, urls: &[String]) -> Result<()> {
    let Some(first) = urls.first() else {
        return Err(Error::Config(format!("{what}: no URL given")));
    };
    for url in urls {
        // A mix of plain and TLS is said first: in a build without TLS, checking the
        // rediss:// URL alone would only name the feature.
        let both_redis = [scheme(url), scheme(first)]
            .iter()
            .all(|s| matches!(s, Some("redis" | "rediss")));
        if !both_redis {
            check_scheme(what, url, false)?;
        }
        if scheme(url) != scheme(first) {
            return Err(Error::Config(format!(
                "{what}: `{}` and `{}` mix plain and TLS connections",
                redacted(url),
                redacted(first)
            )));
        }
        check_scheme(what, url, false)?;
    }
    Ok(())
}

/// The scheme of `url`, if it has one.
fn scheme(url: &str) -> Option<&str> {
    url.split_once("://").map(|(scheme, _)| scheme)
}

/// Refuses a URL of another scheme than redis:// or rediss:// (or, where one server is meant
/// and `unix` allows it, a socket's `unix://` or `redis+unix://`), saying what to write instead.
pub(crate) fn check_scheme(what: &str, url: &str, unix: bool) -> Result<()> {
    const SCHEMES: &str = "use redis://host:port, or rediss://host:port for TLS";
    let shown = redacted(url);
    match scheme(url) {
        Some(scheme @ ("redis" | "rediss")) => {
            check_port(what, url, &shown)?;
            check_tls(what, scheme, &shown, cfg!(feature = "tls"))
        }
        Some("unix" | "redis+unix") if unix => Ok(()),
        Some(other) => {
            let rest = shown.split_once("://").map_or("", |(_, rest)| rest);
            let host = rest.split('/').next().unwrap_or_default();
            let suggestion = if host.is_empty() {
                SCHEMES.to_owned()
            } else {
                format!("use redis://{host}, or rediss://{host} for TLS")
            };
            Err(Error::Config(format!(
                "{what}: `{shown}` is not a Redis URL ({other}:// is not a scheme of Redis); {suggestion}"
            )))
        }
        None if url.trim().is_empty() => Err(Error::Config(format!(
            "{what}: the URL is empty; {SCHEMES}"
        ))),
        // `host:port`, `host`: what a Redis URL would be without its scheme.
        None if url
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:[]".contains(c)) =>
        {
            Err(Error::Config(format!(
                "{what}: `{shown}` has no scheme; use redis://{shown}, or rediss://{shown} for TLS"
            )))
        }
        None => Err(Error::Config(format!(
            "{what}: `{shown}` is not a Redis URL; {SCHEMES}"
        ))),
    }
}

/// Refuses a port that is not a number from 1 to 65535, naming it (the redis crate says only
/// that the URL did not parse).
fn check_port(what: &str, url: &str, shown: &str) -> Result<()> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = match host_port.strip_prefix('[') {
        // `[v6 address]` and maybe `:port`.
        Some(v6) => v6
            .split_once(']')
            .and_then(|(_, after)| after.strip_prefix(':')),
        None => host_port.rsplit_once(':').map(|(_, port)| port),
    };
    match port {
        Some(port) if !port.is_empty() && !port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Err(Error::Config(format!(
                "{what}: `{shown}` has the port `{port}`, which is not a port number (1 to 65535)"
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses `rediss://` in a build without TLS (`tls_built`), naming the feature to enable.
fn check_tls(what: &str, scheme: &str, shown: &str, tls_built: bool) -> Result<()> {
    if scheme == "rediss" && !tls_built {
        return Err(Error::Config(format!(
            "{what}: `{shown}` asks for TLS (rediss://), which this build of ferrisson leaves out: \
             enable its `tls` feature, features = [\"tls\"] in the ferrisson line of Cargo.toml"
        )));
    }
    Ok(())
}

/// `url` with its password left out, for error messages and logs.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_other_schemes_are_refused_with_the_redis_url_to_use() {
        let said = |url: &str| match check_scheme("url", url, true) {
            Err(Error::Config(m)) => m,
            other => panic!("{url}: {other:?}"),
        };
        assert!(said("http://h:1").ends_with("use redis://h:1, or rediss://h:1 for TLS"));
        assert!(said("h:1").contains("has no scheme; use redis://h:1"));
        assert!(said("[::1]:6379").contains("use redis://[::1]:6379"));
        assert!(said("a b").ends_with("use redis://host:port, or rediss://host:port for TLS"));
        assert!(said("http://").ends_with("use redis://host:port, or rediss://host:port for TLS"));
        for fine in ["redis://h", "unix:///tmp/r.sock", "redis+unix:///r"] {
            assert!(check_scheme("url", fine, true).is_ok(), "{fine}");
        }
        let tls = check_scheme("url", "rediss://h:1/2", true);
        assert_eq!(tls.is_ok(), cfg!(feature = "tls"), "{tls:?}");
        assert!(check_scheme("cluster", "unix:///tmp/r.sock", false).is_err());
    }

    #[test]
    fn a_bad_port_is_named() {
        let said = |url: &str| match check_scheme("url", url, true) {
            Err(Error::Config(m)) => m,
            other => panic!("{url}: {other:?}"),
        };
        let m = said("redis://cache.internal:99999");
        assert!(m.contains("the port `99999`"), "{m}");
        assert!(m.contains("1 to 65535"), "{m}");
        assert!(said("redis://:pw@h:0/1").contains("the port `0`"));
        assert!(!said("redis://:pw@h:0/1").contains("pw"));
        assert!(said("redis://h:63x9").contains("the port `63x9`"));
        assert!(said("rediss://[::1]:70000").contains("the port `70000`"));
        for fine in [
            "redis://h:6379/0",
            "redis://[::1]:6379",
            "redis://[::1]",
            "redis://u:p@h",
        ] {
            assert!(check_scheme("url", fine, true).is_ok(), "{fine}");
        }
    }

    #[test]
    fn rediss_without_tls_names_the_feature() {
        match check_tls("url", "rediss", "rediss://h:6380", false) {
            Err(Error::Config(m)) => {
                assert!(m.contains("`tls` feature"), "{m}");
                assert!(m.contains(r#"features = ["tls"]"#), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(check_tls("url", "rediss", "rediss://h", true).is_ok());
        assert!(check_tls("url", "redis", "redis://h", false).is_ok());
    }

    #[test]
    fn passwords_are_left_out_of_shown_urls() {
        assert_eq!(redacted("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redacted("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redacted("http://u:p@w@h"), "http://u:***@h");
        assert_eq!(redacted("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redacted("h:1"), "h:1");
    }
}
