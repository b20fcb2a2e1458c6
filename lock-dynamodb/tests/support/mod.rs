//! Shared set-up of the DynamoDB tests: the emulator endpoint, fresh tables, and
//! SDK interceptors that count calls and inject faults.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Intercept, Region};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
    BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use lock_dynamodb::{DynamoDbStore, DynamoDbStoreBuilder, Layout, TableOptions};

/// The emulator's endpoint, from `LOCK_DYNAMODB_ENDPOINT` (set by
/// `./scripts/test`). Without it the test fails and says how to run it, unless
/// `LOCK_DYNAMODB_SKIP=1` asks to skip, which is printed.
pub fn endpoint() -> Option<String> {
    lock_testkit::server_from_env("LOCK_DYNAMODB_ENDPOINT", "LOCK_DYNAMODB_SKIP", "DynamoDB")
}

/// SDK configuration for the emulator: fixed region and dummy credentials.
pub fn sdk_config(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .endpoint_url(endpoint)
}

/// A table name no other test uses.
pub fn table_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A fresh table of the user's own, not a lock table: key `id` (a string),
/// on demand; its name starts with `prefix`.
pub async fn id_table(sdk: &aws_sdk_dynamodb::Client, prefix: &str) -> String {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = table_name(prefix);
    sdk.create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("a complete attribute definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .expect("a complete key schema element"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create the table");
    name
}

/// A store on a fresh table of `layout`, with these extra builder settings.
pub async fn fresh_store_with(
    layout: Layout,
    configure: impl FnOnce(DynamoDbStoreBuilder) -> DynamoDbStoreBuilder,
) -> Option<DynamoDbStore> {
    let endpoint = endpoint()?;
    let builder = DynamoDbStore::builder(table_name(layout.preset_name())).layout(layout);
    let store = configure(builder)
        .build_with_config(sdk_config(&endpoint))
        .expect("valid store configuration");
    store
        .create_table(TableOptions::default())
        .await
        .expect("create the test table");
    Some(store)
}

/// A store on a fresh table of `layout`.
pub async fn fresh_store(layout: Layout) -> Option<DynamoDbStore> {
    fresh_store_with(layout, |b| b).await
}

/// A second store (its own SDK client and interceptors) on `store`'s table.
pub fn same_table(
    store: &DynamoDbStore,
    configure: impl FnOnce(DynamoDbStoreBuilder) -> DynamoDbStoreBuilder,
) -> DynamoDbStore {
    let endpoint = endpoint().expect("the first store had an endpoint");
    configure(DynamoDbStore::builder(store.table()).layout(store.layout().clone()))
        .build_with_config(sdk_config(&endpoint))
        .expect("valid store configuration")
}

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>()
        .map(|m| m.name().to_owned())
        .unwrap_or_default()
}

/// Counts the HTTP requests sent, by operation name.
#[derive(Clone, Debug, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<Vec<String>>>,
}

impl CallCounter {
    /// Operation names of every request sent so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    /// Forget the calls so far.
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.calls.lock().unwrap().push(operation(cfg));
        Ok(())
    }
}

/// A fault the [`FaultInjector`] applies to the next request of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpFault {
    /// The request is turned into a harmless `DescribeTable` before it leaves (so
    /// nothing is written), and the answer replaced by DynamoDB's throttling error.
    ThrottleBeforeApply,
    /// The request reaches the emulator and applies; the answer is replaced by an
    /// HTTP 500 internal server error, as when DynamoDB fails after the write.
    ServerErrorAfterApply,
    /// Like `ThrottleBeforeApply` but the answer is an access-denied error.
    AccessDenied,
}

#[derive(Debug, Default)]
struct InjectorState {
    script: VecDeque<(String, HttpFault)>,
    /// The fault of the request in flight (set before transmit, used on the answer).
    in_flight: Option<HttpFault>,
}

/// Injects scripted faults at the HTTP level, per operation name (`UpdateItem`,
/// `GetItem`, ...).
#[derive(Clone, Debug, Default)]
pub struct FaultInjector {
    state: Arc<Mutex<InjectorState>>,
}

impl FaultInjector {
    /// Apply `fault` to the next request of `operation`.
    pub fn script(&self, operation: &str, fault: HttpFault) {
        self.state
            .lock()
            .unwrap()
            .script
            .push_back((operation.to_owned(), fault));
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation(cfg);
        let mut state = self.state.lock().unwrap();
        let position = state.script.iter().position(|(o, _)| *o == op);
        let fault = position
            .and_then(|i| state.script.remove(i))
            .map(|(_, f)| f);
        state.in_flight = fault;
        if matches!(
            fault,
            Some(HttpFault::ThrottleBeforeApply | HttpFault::AccessDenied)
        ) {
            // Every lock request names the table, so DescribeTable accepts its body
            // and the emulator changes nothing.
            context
                .request_mut()
                .headers_mut()
                .insert("x-amz-target", "DynamoDB_20120810.DescribeTable");
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let fault = self.state.lock().unwrap().in_flight.take();
        let (status, code, message) = match fault {
            None => return Ok(()),
            Some(HttpFault::ThrottleBeforeApply) => (
                400,
                "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                "Rate of requests exceeds the allowed throughput.",
            ),
            Some(HttpFault::ServerErrorAfterApply) => (
                500,
                "com.amazonaws.dynamodb.v20120810#InternalServerError",
                "Internal server error",
            ),
            Some(HttpFault::AccessDenied) => (
                400,
                "com.amazonaws.dynamodb.v20120810#AccessDeniedException",
                "User is not authorized to perform dynamodb:UpdateItem",
            ),
        };
        let body = format!(r#"{{"__type":"{code}","message":"{message}"}}"#);
        let mut response = Response::new(StatusCode::try_from(status)?, SdkBody::from(body));
        response
            .headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        *context.response_mut() = response;
        Ok(())
    }
}

/// Fresh tables of one layout for the conformance suite; each case's table is
/// deleted after it passes.
#[derive(Clone, Debug)]
pub struct TableFactory(pub Layout);

#[async_trait::async_trait]
impl lock_testkit::StoreFactory for TableFactory {
    async fn create(&self) -> Result<Option<lock_testkit::FreshStore>, lock_core::StoreError> {
        let Some(store) = fresh_store(self.0.clone()).await else {
            return Ok(None);
        };
        let doomed = store.clone();
        let cleanup = lock_testkit::Cleanup::new(move || async move {
            let _ = doomed
                .delete_table(std::time::Duration::from_secs(10))
                .await;
        });
        Ok(Some(lock_testkit::FreshStore::with_cleanup(store, cleanup)))
    }
}

/// A lock client on `store` with `lease` and a 100 ms poll, as the tests use.
pub fn client(
    store: impl lock_core::ConditionalStore,
    owner: &str,
    lease: std::time::Duration,
) -> lock_core::LockClient {
    lock_core::LockClient::builder(store)
        .owner(owner)
        .lease(lease)
        .refresh_period(std::time::Duration::from_millis(100))
        .build()
        .expect("valid client settings")
}
