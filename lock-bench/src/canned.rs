//! A fast DynamoDB-protocol responder, for client-CPU figures only: it answers
//! the store's requests with valid responses built from the request itself, so
//! the client's whole path (the AWS SDK's serialisation, signing, HTTP, parsing,
//! and the store's mapping) runs as against DynamoDB, while the server costs
//! next to nothing and runs in another process. It keeps no state and checks no
//! condition: every conditional write "applies". Never use it to test
//! correctness.
//!
//! * `UpdateItem` answers `Attributes`: the key, every `SET #name = :value` of
//!   the update expression, and the fence (the configured attribute, `1`).
//! * `GetItem` answers no item; `DeleteItem` answers the key as the old item.
//! * Anything else answers `{}`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

/// Serve the responder on `listener` until the task is dropped, one task per
/// connection (connections are kept alive).
pub async fn serve(listener: TcpListener, fence_attribute: &str) {
    let fence_attribute: Arc<str> = fence_attribute.into();
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let fence_attribute = fence_attribute.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request| answer(request, fence_attribute.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Bind a free loopback port.
pub async fn bind() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    Ok((listener, address))
}

async fn answer(
    request: Request<Incoming>,
    fence_attribute: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_owned();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = match target.as_str() {
        "UpdateItem" => json!({ "Attributes": updated_item(&parsed, &fence_attribute) }),
        "DeleteItem" => json!({ "Attributes": parsed.get("Key").cloned().unwrap_or(json!({})) }),
        _ => json!({}),
    };
    let mut response = Response::new(Full::new(Bytes::from(reply.to_string())));
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    Ok(response)
}

/// The item an `UpdateItem` request would leave: its key, its `SET` values, and
/// the fence.
fn updated_item(request: &Value, fence_attribute: &str) -> Value {
    let mut item: Map<String, Value> = request
        .get("Key")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let names: HashMap<&str, &str> = request
        .get("ExpressionAttributeNames")
        .and_then(Value::as_object)
        .map(|names| {
            names
                .iter()
                .filter_map(|(placeholder, name)| Some((placeholder.as_str(), name.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    let values = request.get("ExpressionAttributeValues");
    let expression = request
        .get("UpdateExpression")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let set = expression.strip_prefix("SET ").unwrap_or_default();
    let set = set.split(" REMOVE ").next().unwrap_or_default();
    let set = set.split(" ADD ").next().unwrap_or_default();
    for assignment in set.split(", ") {
        let Some((name, value)) = assignment.split_once(" = ") else {
            continue;
        };
        let (Some(name), Some(value)) = (
            names.get(name.trim()),
            values.and_then(|v| v.get(value.trim())),
        ) else {
            continue;
        };
        item.insert((*name).to_owned(), value.clone());
    }
    item.insert(fence_attribute.to_owned(), json!({ "N": "1" }));
    Value::Object(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_answers_the_key_the_set_values_and_the_fence() {
        let request = json!({
            "Key": { "key": { "S": "a" } },
            "UpdateExpression": "SET #owner = :owner, #rvn = :rvn REMOVE #exp ADD #fence :one",
            "ExpressionAttributeNames": { "#owner": "owner", "#rvn": "rvn", "#exp": "expires", "#fence": "fence" },
            "ExpressionAttributeValues": { ":owner": { "S": "me" }, ":rvn": { "S": "r1" }, ":one": { "N": "1" } },
        });
        assert_eq!(
            updated_item(&request, "fence"),
            json!({
                "key": { "S": "a" },
                "owner": { "S": "me" },
                "rvn": { "S": "r1" },
                "fence": { "N": "1" },
            })
        );
    }
}

/// The child's side of [`spawn_child`]: serve on a free loopback port, for the
/// native layout, printing the URL first. Returns only on an error.
pub async fn serve_child() -> Result<(), crate::BenchError> {
    let (listener, address) = bind().await?;
    println!("http://{address}");
    serve(listener, lock_dynamodb::Layout::native().fence()).await;
    Ok(())
}

/// A native-layout store on the responder at `endpoint`, with fixed
/// credentials and region (nothing is read from the environment).
pub fn store(endpoint: &str) -> Result<lock_dynamodb::DynamoDbStore, crate::BenchError> {
    store_with(endpoint, aws_sdk_dynamodb::config::Builder::new())
}

/// [`store`] from an SDK configuration with settings of the caller's.
pub fn store_with(
    endpoint: &str,
    config: aws_sdk_dynamodb::config::Builder,
) -> Result<lock_dynamodb::DynamoDbStore, crate::BenchError> {
    let config = config
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "AKIDBENCH",
            "bench-secret",
            None,
            None,
            "bench",
        ));
    Ok(lock_dynamodb::DynamoDbStore::builder("bench-table")
        .layout(lock_dynamodb::Layout::native())
        .endpoint_url(endpoint)
        .build_with_config(config)?)
}

/// A responder serving in a child process (this program, run with an argument
/// that makes it serve), so its CPU is not the client's.
#[derive(Debug)]
pub struct Child {
    /// The responder's endpoint URL.
    pub endpoint: String,
    process: std::process::Child,
}

/// Start this program again with `serve_arg`, which must make it serve the
/// responder and print its URL on the first line of its output.
pub fn spawn_child(serve_arg: &str) -> Result<Child, crate::BenchError> {
    use std::io::BufRead;
    let mut process = std::process::Command::new(std::env::current_exe()?)
        .arg(serve_arg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    if let Some(stdout) = process.stdout.take() {
        std::io::BufReader::new(stdout).read_line(&mut line)?;
    }
    let endpoint = line.trim().to_owned();
    let mut child = Child { endpoint, process };
    if !child.endpoint.starts_with("http://") {
        child.stop();
        return Err("the canned responder did not start".into());
    }
    Ok(child)
}

impl Child {
    /// Stop the responder (also done when dropped).
    pub fn stop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}
