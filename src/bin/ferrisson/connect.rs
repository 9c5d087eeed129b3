//! The tool's own client: connected as the library connects (one URL, Cluster seeds, or
//! sentinels and a master name), credentials from the URL or the environment. It holds
//! nothing, and records its identity as `ferrisson-cli`, so an operator's session shows as
//! what it is in `clients`; `--no-identity` turns that off for an ACL user that may not write
//! identities.

use ferrisson::Client;

use crate::args::Server;
use crate::fail::{Code, Failure};

/// The application name the tool's client records.
const APP: &str = "ferrisson-cli";

/// Connects to the server `server` names.
pub(crate) async fn connect(server: &Server) -> Result<Client, Failure> {
    let login = Login::from_env();
    let builder = Client::builder()
        .app_name(APP)
        .identity(!server.no_identity)
        .connection_timeout(server.timeout)
        .response_timeout(server.timeout);
    let builder = match (&server.cluster[..], &server.sentinel[..], &server.master) {
        ([], [], None) => builder.url(login.apply(&server.url)),
        (seeds, [], None) if !seeds.is_empty() => {
            builder.cluster(seeds.iter().map(|s| login.apply(&with_scheme(s))))
        }
        ([], sentinels, Some(master)) if !sentinels.is_empty() => builder.sentinel(
            master,
            sentinels.iter().map(|s| login.apply(&with_scheme(s))),
        ),
        ([], [], Some(_)) => return Err(usage("--master goes with --sentinel ADDR")),
        ([], _, None) => return Err(usage("--sentinel needs --master NAME")),
        _ => return Err(usage("--cluster and --sentinel exclude each other")),
    };
    Ok(builder.build().await?)
}

/// How the connection is shown in `watch`'s header: the URL without its password, the first
/// seed, or the master's name.
pub(crate) fn shown(server: &Server) -> String {
    match (server.cluster.first(), &server.master) {
        (Some(seed), _) => format!("cluster {}", without_password(&with_scheme(seed))),
        (None, Some(master)) => format!("sentinel master {master}"),
        (None, None) => without_password(&server.url),
    }
}

fn usage(message: &str) -> Failure {
    Failure::new(Code::Usage, format!("{message}; see `ferrisson --help`"))
}

/// `host:port` as `redis://host:port`; a URL as it is.
fn with_scheme(address: &str) -> String {
    if address.contains("://") {
        address.to_owned()
    } else {
        format!("redis://{address}")
    }
}

/// `url` with the password (if any) left out: the login is everything of the authority (up to
/// the first `/` after `://`) before its *last* `@`, since an unencoded `@` in a password is
/// common and must not split it; a socket URL's `pass=`/`password=` parameter is hidden too.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((login, host)) => match login.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{login}@{host}"),
        },
        None => authority.to_owned(),
    };
    let path = match path.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key == "pass" || key == "password" => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => path.to_owned(),
    };
    format!("{scheme}://{authority}{path}")
}

/// Credentials from the environment: `FERRISSON_USERNAME`, `FERRISSON_PASSWORD`.
#[derive(Debug, Default)]
struct Login {
    user: Option<String>,
    password: Option<String>,
}

impl Login {
    fn from_env() -> Self {
        let read = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Login {
            user: read("FERRISSON_USERNAME"),
            password: read("FERRISSON_PASSWORD"),
        }
    }

    /// `url` with these credentials, unless it carries its own (the URL wins) or there are none.
    fn apply(&self, url: &str) -> String {
        if self.user.is_none() && self.password.is_none() {
            return url.to_owned();
        }
        let user = encode(self.user.as_deref().unwrap_or(""));
        let password = encode(self.password.as_deref().unwrap_or(""));
        if url.starts_with("unix://") || url.starts_with("redis+unix://") {
            // A socket's URL takes them as query parameters.
            let join = if url.contains('?') { '&' } else { '?' };
            let mut pairs = Vec::new();
            if !user.is_empty() {
                pairs.push(format!("user={user}"));
            }
            if !password.is_empty() {
                pairs.push(format!("pass={password}"));
            }
            return format!("{url}{join}{}", pairs.join("&"));
        }
        match url.split_once("://") {
            Some((scheme, rest)) if !rest.split('/').next().unwrap_or("").contains('@') => {
                let login = if password.is_empty() {
                    format!("{user}@")
                } else {
                    format!("{user}:{password}@")
                };
                format!("{scheme}://{login}{rest}")
            }
            _ => url.to_owned(),
        }
    }
}

/// Percent-encodes all but the unreserved characters, so any password survives the URL.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(user: Option<&str>, password: Option<&str>) -> Login {
        Login {
            user: user.map(str::to_owned),
            password: password.map(str::to_owned),
        }
    }

    #[test]
    fn the_environment_fills_urls_without_credentials() {
        let both = login(Some("ops"), Some("p@ss:w/rd"));
        assert_eq!(
            both.apply("redis://h:6379/2"),
            "redis://ops:p%40ss%3Aw%2Frd@h:6379/2"
        );
        assert_eq!(both.apply("redis://me:own@h"), "redis://me:own@h");
        assert_eq!(login(None, Some("s")).apply("rediss://h"), "rediss://:s@h");
        assert_eq!(
            both.apply("unix:///run/redis.sock"),
            "unix:///run/redis.sock?user=ops&pass=p%40ss%3Aw%2Frd"
        );
        assert_eq!(Login::default().apply("redis://h"), "redis://h");
    }

    #[test]
    fn shown_urls_keep_passwords_out() {
        assert_eq!(
            without_password("redis://u:secret@h:1"),
            "redis://u:***@h:1"
        );
        assert_eq!(without_password("redis://h:1"), "redis://h:1");
        // An `@` in the password: all of it goes, up to the authority's last `@`.
        assert_eq!(without_password("redis://u:p@ss@h"), "redis://u:***@h");
        assert_eq!(
            without_password("redis://u:p@s@s@h:6379/2"),
            "redis://u:***@h:6379/2"
        );
        assert_eq!(without_password("rediss://:p@ss@h"), "rediss://:***@h");
        assert_eq!(without_password("redis://u@h/0"), "redis://u@h/0");
        // An `@` after the authority is no login.
        assert_eq!(without_password("redis://h:1/x@y"), "redis://h:1/x@y");
        assert_eq!(
            without_password("unix:///run/r.sock?user=ops&pass=p@ss&db=1"),
            "unix:///run/r.sock?user=ops&pass=***&db=1"
        );
        assert_eq!(without_password("h:1"), "h:1");
        assert_eq!(with_scheme("10.0.0.1:7000"), "redis://10.0.0.1:7000");
    }
}
