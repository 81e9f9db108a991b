//! Connecting to the server: TLS as the URL's `sslmode` asks, with the system's trusted roots.

use std::sync::Arc;

use postgres::config::{Host, SslMode};
use postgres::{Client, Config, NoTls};

use super::error::{describe, storage_msg};
use crate::ledger::BankError;

/// Connects with TLS as the URL's `sslmode` asks. Under `prefer` (the default) a machine
/// without any trusted root connects without TLS, as libpq would when TLS cannot be had; a
/// server that offers TLS must still present a certificate the client trusts.
pub(super) fn connect(config: &Config, location: &str) -> Result<Client, BankError> {
    let tcp = config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)));
    let mode = config.get_ssl_mode();
    let out = if mode == SslMode::Disable || !tcp {
        // TLS is never used on a Unix socket.
        config.connect(NoTls)
    } else {
        match tls(location) {
            Ok(connector) => config.connect(connector),
            Err(_) if mode == SslMode::Prefer => config.connect(NoTls),
            Err(e) => return Err(e),
        }
    };
    out.map_err(|e| {
        let mut message = format!("cannot connect: {}", describe(&e));
        if message.contains("UnknownIssuer") {
            // rustls's name for it says nothing of what to do.
            message.push_str(
                " (no root this machine trusts signed the server's certificate: point \
                 SSL_CERT_FILE at its CA's certificate)",
            );
        }
        storage_msg(location, message)
    })
}

/// rustls with the system's trusted roots (`SSL_CERT_FILE`, `SSL_CERT_DIR` override them).
fn tls(location: &str) -> Result<tokio_postgres_rustls::MakeRustlsConnect, BankError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(storage_msg(
            location,
            format!(
                "TLS: no trusted root certificate could be loaded ({}); set SSL_CERT_FILE, or \
                 sslmode=disable for a server without TLS",
                if why.is_empty() {
                    "the system store is empty".to_string()
                } else {
                    why.join("; ")
                }
            ),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| storage_msg(location, format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
