//! The TLS handshake of a connection to an SSL or SASL_SSL listener: run on the shard's `auth`
//! task queue (a burst of handshakes yields to produce and fetch), bounded by
//! `sasl.server.authentication.timeout.ms`; anything that is not TLS (plaintext Kafka, garbage)
//! fails it and the connection closes.

use std::rc::Rc;
use std::time::Duration;

use futures_lite::io::BufReader;
use futures_rustls::TlsAcceptor;
use glommio::net::TcpStream;

use crate::frontend::io::{TlsStream, TLS_READ_BUFFER, TLS_WRITE_BUFFER};

use crate::shard::BrokerShard;
use crate::tls::TlsConfig;

/// Completes the handshake: the TLS stream and, when the client gave a certificate the
/// truststore verified, its principal on an SSL listener (`User:` and the name
/// `ssl.principal.mapping.rules` make of its subject DN; a DN no rule applies to fails).
pub async fn accept(
    shard: &Rc<BrokerShard>,
    tls: &TlsConfig,
    stream: TcpStream,
) -> Result<(TlsStream, Option<String>), String> {
    let acceptor = TlsAcceptor::from(tls.server.clone());
    let tls = tls.clone();
    let timeout = Duration::from_millis(shard.config.sasl_server_authentication_timeout_ms);
    let handshake = async move {
        let io = BufReader::with_capacity(TLS_READ_BUFFER, stream);
        let done = futures_lite::future::or(async { Some(acceptor.accept(io).await) }, async {
            glommio::timer::sleep(timeout).await;
            None
        })
        .await;
        match done {
            None => Err(format!("no handshake within {} ms", timeout.as_millis())),
            Some(Err(e)) => Err(e.to_string()),
            Some(Ok(mut s)) => {
                s.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUFFER));
                let principal = match s.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                    Some(cert) => tls.principal_of(cert)?,
                    None => None,
                };
                Ok((s, principal))
            }
        }
    };
    let shutdown = async {
        shard.shutdown.wait().await;
        Err("shutting down".to_string())
    };
    let on_queue = async {
        match crate::frontend::auth_queue::run(shard, handshake).await {
            Ok(done) => done,
            Err(gone) => Err(gone),
        }
    };
    futures_lite::future::or(on_queue, shutdown).await
}
