//! A bounded HTTP GET for SGLang's endpoints (`/health_generate`, `/v1/models`,
//! `/server_info`), and a bounded JSON POST (the smoke test's chat requests), which a hostile or
//! broken server answers.
//!
//! # Guarantees
//! - The whole request (connect, headers, body) ends within the deadline given: a server that
//!   trickles bytes or never finishes cannot hold the agent.
//! - At most [`MAX_BODY`] bytes of body are kept; a longer answer is an error, read no further.
//! - Headers are bounded by the client's own limit; no redirect is followed.
//! - The body is returned as text with invalid UTF-8 replaced, never sliced by byte index.

use std::time::Duration;

/// The largest body kept (SGLang's answers are a few KiB).
pub const MAX_BODY: u64 = 1024 * 1024;

/// Why a GET gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error("GET {url}: {source}")]
    Request {
        url: String,
        #[source]
        source: ureq::Error,
    },
}

/// `http://host:port/path`, with an IPv6 host in brackets.
fn url(host: &str, port: u16, path: &str) -> String {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("http://{host}:{port}{path}")
}

/// An agent whose every request ends within `deadline`, follows no redirect, bounds headers.
fn agent(deadline: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(deadline))
        .http_status_as_error(false)
        .max_redirects(0)
        .max_response_header_size(64 * 1024)
        .build()
        .into()
}

/// `GET http://host:port/path` within `deadline`: (status, body).
pub fn get(
    host: &str,
    port: u16,
    path: &str,
    deadline: Duration,
) -> Result<(u16, String), GetError> {
    request(host, port, path, deadline, |agent, url| {
        agent.get(url).header("Accept", "application/json").call()
    })
}

/// `POST http://host:port/path` with a JSON body, within `deadline`: (status, body). The same
/// bounds as [`get`].
pub fn post_json(
    host: &str,
    port: u16,
    path: &str,
    body: &str,
    deadline: Duration,
) -> Result<(u16, String), GetError> {
    request(host, port, path, deadline, |agent, url| {
        agent
            .post(url)
            .header("Accept", "application/json")
            .header("Content-Type", "application/json")
            .send(body)
    })
}

/// One request to `http://host:port/path` made by `send` on a bounded agent, its body read
/// within the bounds; an error names the URL.
fn request(
    host: &str,
    port: u16,
    path: &str,
    deadline: Duration,
    send: impl FnOnce(&ureq::Agent, &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<(u16, String), GetError> {
    let url = url(host, port, path);
    send(&agent(deadline), &url)
        .and_then(read_body)
        .map_err(|source| GetError::Request { url, source })
}

/// The status and at most [`MAX_BODY`] bytes of body.
fn read_body(mut resp: ureq::http::Response<ureq::Body>) -> Result<(u16, String), ureq::Error> {
    let status = resp.status().as_u16();
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_vec()?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests;
