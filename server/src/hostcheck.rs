//! The `Host` a loopback listener answers to: the admin API and dashboard,
//! and `/metrics`, refuse a request that names another (DNS rebinding: a
//! page elsewhere whose name now resolves to 127.0.0.1).

use std::net::SocketAddr;

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ApiError;

/// The `Host` values that name the admin address bound at `addr`: the
/// address itself and `localhost` with its port.
pub(crate) fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![addr.to_string(), format!("localhost:{port}")];
    if addr.ip().is_loopback() {
        hosts.push(format!("127.0.0.1:{port}"));
        hosts.push(format!("[::1]:{port}"));
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The refusal of a request whose `Host` is none of `allowed` (the names of
/// a loopback listener, `what`), or `None` when it is one of them.
pub(crate) fn refuse_other_host(
    allowed: &[String],
    request: &Request,
    what: &str,
) -> Option<Response> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    (!allowed.contains(&host)).then(|| {
        let error = format!(
            "this is {what} of {}; Host `{host}` is not it",
            allowed.first().map_or("", String::as_str)
        );
        (StatusCode::MISDIRECTED_REQUEST, Json(ApiError { error })).into_response()
    })
}
