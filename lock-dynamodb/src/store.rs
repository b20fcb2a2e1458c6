//! [`DynamoDbStore`]: the [`ConditionalStore`] on DynamoDB, and its builder.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{Intercept, SharedInterceptor};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Get, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactGetItem,
    TransactWriteItem, Update,
};
use lock_core::{
    AtomicWrites, Capabilities, ConditionalStore, Cursor, DataUpdate, Expect, Fence, FenceUpdate,
    FencesAfterDeletion, KeyedWrite, LockKey, LockRecord, ManyOutcome, NewRecord, Outcome, Page,
    StoreClock, StoreError,
};

use crate::errors::StoreConfigError;
use crate::item::{self, Item};
use crate::layout::{Layout, ReleaseMode};
use crate::mapping::{Access, Context, map_sdk_error};

/// Time limits of every DynamoDB call the store makes.
///
/// The SDK's own defaults are a 3.1 s connect timeout and **no** read, attempt or
/// operation timeout, so a server that accepts a connection and never answers
/// would hang a call forever. The store always sets all three:
///
/// * `connect`: establishing a connection (default 1 s). A write that fails here
///   was never sent and is reported as unavailable.
/// * `attempt`: one HTTP attempt, from sending to the end of the response (default
///   2 s). A write that times out here may have applied: ambiguous.
/// * `operation`: a whole call including the SDK's retries of reads (default 5 s).
///   Conditional writes make exactly one attempt.
///
/// Keep `attempt` well below the shortest lease you use: the client can only
/// trust a heartbeat that returned, and a write that may still be in flight when
/// the lease ends is wasted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Connect timeout.
    pub connect: Duration,
    /// Per-attempt timeout.
    pub attempt: Duration,
    /// Per-operation timeout (all attempts).
    pub operation: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(1),
            attempt: Duration::from_secs(2),
            operation: Duration::from_secs(5),
        }
    }
}

impl Timeouts {
    /// Set the connect timeout.
    pub fn with_connect(mut self, timeout: Duration) -> Self {
        self.connect = timeout;
        self
    }
    /// Set the per-attempt timeout.
    pub fn with_attempt(mut self, timeout: Duration) -> Self {
        self.attempt = timeout;
        self
    }
    /// Set the per-operation timeout.
    pub fn with_operation(mut self, timeout: Duration) -> Self {
        self.operation = timeout;
        self
    }

    fn validate(&self) -> Result<(), StoreConfigError> {
        for (which, value) in [
            ("connect", self.connect),
            ("attempt", self.attempt),
            ("operation", self.operation),
        ] {
            if value.is_zero() {
                return Err(StoreConfigError::ZeroTimeout { which });
            }
        }
        Ok(())
    }

    fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

/// Builds a [`DynamoDbStore`]; start with [`DynamoDbStore::builder`].
#[derive(Debug, Clone)]
pub struct DynamoDbStoreBuilder {
    table: String,
    layout: Layout,
    timeouts: Timeouts,
    read_attempts: u32,
    endpoint_url: Option<String>,
    interceptors: Vec<SharedInterceptor>,
}

impl DynamoDbStoreBuilder {
    /// The table layout (default [`Layout::native`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Time limits of every call (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// How many attempts the SDK makes for reads (`GetItem`, `Scan`, `Query`,
    /// `DescribeTable`), with its standard backoff; default 3. Conditional writes
    /// always make exactly one attempt: the lock client retries them and resolves
    /// ambiguous ones by RVN.
    pub fn read_attempts(mut self, attempts: u32) -> Self {
        self.read_attempts = attempts;
        self
    }

    /// Send requests to this endpoint (for example `http://127.0.0.1:8000` for a
    /// local emulator) instead of the one from the configuration.
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Add an SDK interceptor to every call (metrics, tracing, fault injection in
    /// tests).
    pub fn interceptor(mut self, interceptor: impl Intercept + 'static) -> Self {
        self.interceptors.push(SharedInterceptor::new(interceptor));
        self
    }

    /// Does nothing: the store reads the key after every rejected write the
    /// server answered without the current item, on DynamoDB and on servers
    /// that ignore `ReturnValuesOnConditionCheckFailure` alike.
    #[deprecated(
        note = "the store reads after every conflict answered without the item; remove the call"
    )]
    pub fn read_after_conflict_without_item(self, _enabled: bool) -> Self {
        self
    }

    /// Build from an [`SdkConfig`] (region, credentials, endpoint, HTTP client).
    pub fn build(self, sdk_config: &SdkConfig) -> Result<DynamoDbStore, StoreConfigError> {
        if let Some(url) = sdk_config.endpoint_url() {
            validate_endpoint(url)?;
        }
        self.build_with_config(aws_sdk_dynamodb::config::Builder::from(sdk_config))
    }

    /// Build on a client the application already has: its credentials, region,
    /// endpoint, HTTP client and interceptors are kept. The store still applies
    /// its own per-request settings: its operation and attempt timeouts, its
    /// read retries, and no SDK retries at all for conditional writes (a write
    /// re-sent by the SDK after a lost answer would be resolved as someone
    /// else's), whatever retry configuration the client has.
    pub fn build_from_client(
        self,
        client: &aws_sdk_dynamodb::Client,
    ) -> Result<DynamoDbStore, StoreConfigError> {
        self.build_with_config(client.config().to_builder())
    }

    /// Build from the default configuration chain: environment
    /// (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`,
    /// `AWS_ENDPOINT_URL_DYNAMODB`, ...), shared config and credentials files,
    /// profiles, SSO, web identity and instance roles.
    pub async fn build_from_env(self) -> Result<DynamoDbStore, StoreConfigError> {
        let sdk_config = aws_config::defaults(BehaviorVersion::latest()).load().await;
        self.build(&sdk_config)
    }

    /// Build from a DynamoDB client configuration builder, for full control. The
    /// store still sets its timeouts, read attempts, endpoint and interceptors on it,
    /// and turns stalled-stream protection off (the attempt timeout covers a
    /// stalled request or reply sooner).
    pub fn build_with_config(
        self,
        config: aws_sdk_dynamodb::config::Builder,
    ) -> Result<DynamoDbStore, StoreConfigError> {
        validate_table_name(&self.table)?;
        self.layout.validate()?;
        self.timeouts.validate()?;
        if self.read_attempts == 0 {
            return Err(StoreConfigError::ZeroReadAttempts);
        }
        if let Some(url) = &self.endpoint_url {
            validate_endpoint(url)?;
        }
        let mut config = config
            .timeout_config(self.timeouts.config())
            .retry_config(RetryConfig::standard().with_max_attempts(self.read_attempts))
            // It watches every body with timers, and its 5 s grace is longer than
            // the attempt timeout above: it could never act first, only cost
            // (about 4 % of the client's CPU per request).
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
        if let Some(url) = &self.endpoint_url {
            config = config.endpoint_url(url);
        }
        for interceptor in self.interceptors {
            config.push_interceptor(interceptor);
        }
        let config = config.build();
        // Without a region the SDK fails every call, and only once it is made.
        if config.region().is_none() {
            return Err(StoreConfigError::NoRegion);
        }
        let client = Client::from_conf(config);
        Ok(DynamoDbStore {
            inner: Arc::new(Inner {
                client,
                table: self.table,
                layout: self.layout,
                schema: tokio::sync::OnceCell::new(),
                no_transactions: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }
}

/// An endpoint URL the SDK would mis-read (it connects to port 80 for a port
/// out of range) is refused before anything is sent.
fn validate_endpoint(url: &str) -> Result<(), StoreConfigError> {
    let invalid = |reason| StoreConfigError::InvalidEndpoint {
        url: url.to_owned(),
        reason,
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| invalid("it must start with http:// or https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    // An IPv6 host is bracketed; a port follows the last colon outside them.
    let (host, port) = match host_port.rfind(':') {
        Some(colon) if !host_port[colon..].contains(']') => {
            (&host_port[..colon], Some(&host_port[colon + 1..]))
        }
        _ => (host_port, None),
    };
    if host.is_empty() || host == "[]" {
        return Err(invalid("it has no host"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(invalid("the port must be a number from 1 to 65535")),
            Ok(_) => {}
        }
    }
    Ok(())
}

fn validate_table_name(name: &str) -> Result<(), StoreConfigError> {
    let ok = (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(StoreConfigError::InvalidTableName { name: name.into() })
    }
}

/// Slack added to twice the lease before an expiry (TTL) time: wall-clock skew
/// between this host and DynamoDB, and a TTL sweep that starts early.
const TTL_SLACK: Duration = Duration::from_secs(600);

/// A [`ConditionalStore`] on one DynamoDB table.
///
/// Every state change is one conditional write:
///
/// * acquiring a vacant key (absent or released) is one `UpdateItem` whose
///   condition is "absent or released" and which increments the fence with `ADD`;
/// * takeover, heartbeat and release are one `UpdateItem` conditional on the RVN
///   (in a layout whose [`ReleaseMode`] is `Delete`, release is one conditional
///   `DeleteItem` instead);
/// * a rejected write returns the current item
///   (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so a conflict costs no read.
///
/// Reads are strongly consistent. Conditional writes are never retried by the SDK.
/// Keys and items are checked against DynamoDB's limits before anything is sent.
///
/// Cloning is cheap and shares the client.
#[derive(Clone)]
pub struct DynamoDbStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) layout: Layout,
    /// Whether the table's key schema fits the layout (`Some((expected,
    /// found))` when it does not), learnt once, when first needed.
    schema: tokio::sync::OnceCell<Option<(String, String)>>,
    /// Set when the server answered `TransactWriteItems` as an operation it
    /// does not have (a DynamoDB-compatible server): several keys are then
    /// written one per request.
    no_transactions: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("table", &self.inner.table)
            .field("layout", &self.inner.layout.preset_name())
            .finish_non_exhaustive()
    }
}

/// The per-call override that turns off SDK retries for conditional writes.
fn single_attempt() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled())
}

/// The most items of one DynamoDB transaction.
const MAX_TRANSACTION_ITEMS: usize = 100;

/// The most keys read back in one `TransactGetItems` after a transaction.
const READ_BACK_ITEMS: usize = 25;

/// The most bytes of one DynamoDB transaction.
const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// One conditional `UpdateItem`, ready to send alone or in a transaction.
struct PreparedUpdate {
    key: HashMap<String, AttributeValue>,
    update: String,
    condition: String,
    names: HashMap<String, String>,
    values: Option<HashMap<String, AttributeValue>>,
}

/// Expression attribute names and values, built up per request.
#[derive(Default)]
struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    fn name(&mut self, placeholder: &str, attribute: &str) -> String {
        self.names
            .insert(placeholder.to_owned(), attribute.to_owned());
        placeholder.to_owned()
    }
    fn value(&mut self, placeholder: &str, value: AttributeValue) -> String {
        self.values.insert(placeholder.to_owned(), value);
        placeholder.to_owned()
    }
    fn values(
        self,
    ) -> (
        HashMap<String, String>,
        Option<HashMap<String, AttributeValue>>,
    ) {
        let values = (!self.values.is_empty()).then_some(self.values);
        (self.names, values)
    }
}

impl DynamoDbStore {
    /// Start building a store on `table`.
    pub fn builder(table: impl Into<String>) -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder {
            table: table.into(),
            layout: Layout::default(),
            timeouts: Timeouts::default(),
            read_attempts: 3,
            endpoint_url: None,
            interceptors: Vec::new(),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The table layout.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// An upper bound on the bytes DynamoDB counts for the item that `new`
    /// leaves under `key`, for capacity planning: one write request unit
    /// covers an item of up to 1 KB, and a conditional write, applied or
    /// rejected, is billed by the larger of the item before and after. Counts
    /// the key, every attribute the write sets, the expiry it would write and
    /// the fence, numbers at their largest (21 bytes); data the write keeps
    /// (`DataUpdate::Keep`) is not in `new`: add its length. Sends nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{DataUpdate, FenceUpdate, LockKey, NewRecord, Rvn};
    /// use lock_dynamodb::{DynamoDbStore, Layout};
    ///
    /// let config = aws_sdk_dynamodb::config::Builder::new()
    ///     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
    ///     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    /// let store = DynamoDbStore::builder("locks").build_with_config(config)?;
    /// let heartbeat = NewRecord {
    ///     owner: "web-3.eu-west-1.compute.internal-1a2b3c4d".into(),
    ///     rvn: Rvn::fresh(),
    ///     lease: Duration::from_secs(20),
    ///     released: false,
    ///     fence: FenceUpdate::Keep,
    ///     data: DataUpdate::Keep,
    ///     expires_at: None,
    /// };
    /// let size = store.item_size(&LockKey::new("nightly-report"), &heartbeat)?;
    /// assert!(size <= 1024, "one write unit per heartbeat: {size} bytes");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn item_size(&self, key: &LockKey, new: &NewRecord) -> Result<usize, StoreError> {
        let layout = &self.inner.layout;
        let key_item = item::key_item(layout, key)?;
        let (lease_name, lease_encoding) = layout.lease();
        let mut attributes: Vec<(&str, AttributeValue)> = vec![
            (layout.owner(), AttributeValue::S(new.owner.clone())),
            (layout.rvn(), AttributeValue::S(new.rvn.as_str().to_owned())),
            (lease_name, item::encode_lease(lease_encoding, new.lease)),
            (layout.fence(), AttributeValue::N(String::new())),
        ];
        if let Some((name, encoding)) = layout.released()
            && let Some(value) = item::encode_released(encoding, new.released)
        {
            attributes.push((name, value));
        }
        if let (Some(name), Some(bytes)) = (layout.data(), new.data.bytes()) {
            attributes.push((
                name,
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(bytes)),
            ));
        }
        let data_attributes = match new.data.bytes() {
            Some(bytes) if layout.data_as_attributes() => {
                crate::attributes::attributes_from_data(layout, key, bytes)?
            }
            _ => HashMap::new(),
        };
        attributes.extend(
            data_attributes
                .iter()
                .map(|(name, value)| (name.as_str(), value.clone())),
        );
        if let (Some(name), Some(at)) = (layout.expires_at(), self.expiry(new)) {
            attributes.push((name, AttributeValue::N(at.to_string())));
        }
        if let Some(stamp) = layout
            .written()
            .and_then(|name| Some((name, item::written_now(new.rvn.as_str())?)))
        {
            attributes.push(stamp);
        }
        Ok(key_item
            .iter()
            .map(|(name, value)| item::attribute_size(name, value))
            .chain(
                attributes
                    .iter()
                    .map(|(name, value)| item::attribute_size(name, value)),
            )
            .sum())
    }

    /// The underlying SDK client (for example to inspect items in tests).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn ctx(&self, operation: &'static str) -> Context<'_> {
        Context {
            operation,
            table: &self.inner.table,
            layout: &self.inner.layout,
        }
    }

    fn record(&self, item: &Item) -> Result<LockRecord, StoreError> {
        item::record_from_item(&self.inner.layout, &self.inner.table, item)
    }

    /// The "absent or released" condition.
    fn vacant_condition(&self, expr: &mut Expr) -> String {
        let layout = &self.inner.layout;
        let pk = expr.name("#pk", layout.partition_key());
        match layout.released() {
            Some((name, encoding)) => {
                let rel = expr.name("#rel", name);
                let marker = expr.value(":released", item::released_marker(encoding));
                format!("attribute_not_exists({pk}) OR {rel} = {marker}")
            }
            None => format!("attribute_not_exists({pk})"),
        }
    }

    fn version_condition(&self, expr: &mut Expr, rvn: &lock_core::Rvn) -> String {
        let r = expr.name("#rvn", self.inner.layout.rvn());
        let expected = expr.value(":expected", AttributeValue::S(rvn.as_str().to_owned()));
        format!("{r} = {expected}")
    }

    /// The current record after a rejection, from the item the server
    /// returned (every write asks for it: `ReturnValuesOnConditionCheckFailure
    /// = ALL_OLD`). A rejection without one is read, consistently: DynamoDB
    /// returns none only when the key is absent (a condition on a version of
    /// a record deleted since: rare), and a DynamoDB-compatible server that
    /// ignores the parameter returns none ever, so one read is the price of
    /// knowing, with nothing to configure.
    async fn rejected(&self, key: &LockKey, item: Option<&Item>) -> Result<Outcome, StoreError> {
        let current = match item {
            Some(item) if !item.is_empty() => Some(self.record(item)?),
            _ => self.get_item(key).await?,
        };
        tracing::debug!(table = %self.inner.table, %key, current = ?current.as_ref().map(|r| &r.rvn), "conditional write rejected");
        Ok(Outcome::Rejected { current })
    }

    fn check_size(
        &self,
        key: &LockKey,
        key_item: &Item,
        attributes: &[(&str, &AttributeValue)],
        fence: bool,
    ) -> Result<(), StoreError> {
        let size: usize = key_item
            .iter()
            .map(|(n, v)| item::attribute_size(n, v))
            .chain(attributes.iter().map(|(n, v)| item::attribute_size(n, v)))
            .sum::<usize>()
            + if fence {
                item::attribute_size(self.inner.layout.fence(), &AttributeValue::N(String::new()))
            } else {
                0
            };
        Ok(item::limits(&self.inner.layout).check_record_size(key, size)?)
    }

    /// The expiry time to write, if any: the caller's, or the layout's default,
    /// but never before the lease written with it could have run out, with
    /// room to spare (see [`Layout::with_default_expiry`]). A released record
    /// kept in place gets no default expiry: it is kept for its fence, which
    /// the time to live would reset.
    fn expiry(&self, new: &NewRecord) -> Option<u64> {
        let kept_released =
            new.released && self.inner.layout.release_mode() == ReleaseMode::MarkReleased;
        let asked = new.expires_at.or_else(|| {
            if kept_released {
                return None;
            }
            self.inner
                .layout
                .default_expiry()
                .map(item::epoch_seconds_in)
        })?;
        let floor = item::epoch_seconds_in(new.lease.saturating_mul(2).saturating_add(TTL_SLACK));
        Some(asked.max(floor))
    }

    /// `put` with `released = true` in a layout that deletes on release.
    async fn release_by_delete(
        &self,
        key: &LockKey,
        key_item: Item,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let mut expr = Expr::default();
        let condition = match &expect {
            Expect::Vacant => {
                let pk = expr.name("#pk", self.inner.layout.partition_key());
                format!("attribute_not_exists({pk})")
            }
            Expect::Version(rvn) => self.version_condition(&mut expr, rvn),
        };
        let (names, values) = expr.values();
        let result = self
            .inner
            .client
            .delete_item()
            .table_name(&self.inner.table)
            .set_key(Some(key_item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(values)
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .config_override(single_attempt())
            .send()
            .await;
        match result {
            Ok(output) => {
                let old = match output.attributes() {
                    Some(item) if !item.is_empty() => Some(self.record(item)?),
                    _ => None,
                };
                let old_fence = old.as_ref().map_or(Fence(0), |r| r.fence);
                let data = new.data.apply(old.and_then(|r| r.data));
                let fence = match new.fence {
                    FenceUpdate::Keep => old_fence,
                    FenceUpdate::Next => Fence(old_fence.0.saturating_add(1)),
                };
                Ok(Outcome::Applied(LockRecord {
                    key: key.clone(),
                    owner: new.owner,
                    rvn: new.rvn,
                    lease: new.lease,
                    released: true,
                    fence,
                    data,
                    expires_at: new.expires_at,
                    written: None,
                }))
            }
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && let DeleteItemError::ConditionalCheckFailedException(ccf) = service.err()
                {
                    return self.rejected(key, ccf.item()).await;
                }
                Err(map_sdk_error(
                    err,
                    Access::Write,
                    self.ctx("DeleteItem (release)"),
                ))
            }
        }
    }
}

impl DynamoDbStore {
    /// Why the table's key schema does not fit the layout, if it does not:
    /// one `DescribeTable`, the first time it is asked (a failed describe is
    /// not remembered, and explains nothing).
    async fn schema_mismatch(&self) -> Option<crate::TableError> {
        let checked = self
            .inner
            .schema
            .get_or_try_init(|| async {
                let description = self.describe().await?;
                Ok::<_, crate::TableError>(description.and_then(|description| {
                    crate::table::key_schema_mismatch(self.layout(), &description)
                }))
            })
            .await;
        let (expected, found) = checked.ok().cloned().flatten()?;
        Some(crate::TableError::KeySchemaMismatch {
            table: self.inner.table.clone(),
            expected,
            found,
        })
    }

    /// A request DynamoDB refused as invalid because of its key (the table's
    /// key schema is not the layout's) is explained: the error keeps
    /// DynamoDB's words and gets a [`TableError::KeySchemaMismatch`](crate::TableError::KeySchemaMismatch)
    /// as its source (which table, the schema found, the one the layout
    /// needs), for a caller to find by downcasting.
    async fn explain<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match result {
            // Only DynamoDB's own refusals (they carry the SDK error): a key
            // this store refused before sending is explained already. Any of
            // them: DynamoDB says "The provided key element does not match the
            // schema", an emulator may say only "Validation Exception"; the
            // check is one DescribeTable per store, remembered.
            Err(error)
                if error.kind() == lock_core::StoreErrorKind::Invalid
                    && std::error::Error::source(&error).is_some() =>
            {
                match self.schema_mismatch().await {
                    Some(mismatch) => {
                        Err(StoreError::invalid(error.message().to_owned()).with_source(mismatch))
                    }
                    None => Err(error),
                }
            }
            other => other,
        }
    }
}

/// The store calls as DynamoDB answers them; the trait methods below add the
/// explanation of a table whose key schema does not fit the layout.
impl DynamoDbStore {
    async fn get_item(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        match self.get_raw_item(key).await? {
            Some(item) => Ok(Some(self.record(&item)?)),
            None => Ok(None),
        }
    }

    /// The item under `key` as DynamoDB holds it (consistent read).
    async fn get_raw_item(&self, key: &LockKey) -> Result<Option<Item>, StoreError> {
        let key_item = item::key_item(&self.inner.layout, key)?;
        let output = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(key_item))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| map_sdk_error(err, Access::Read, self.ctx("GetItem")))?;
        Ok(output.item.filter(|item| !item.is_empty()))
    }

    /// For data kept as attributes: the attributes a write of `data` sets, and
    /// the names of those it must remove (the data attributes the record has
    /// at the version the write expects, read first, when the write replaces
    /// or clears the data on a version). `Err(Ok(outcome))`: the read showed
    /// the write would be rejected; this is its outcome.
    async fn data_attributes(
        &self,
        key: &LockKey,
        expect: &Expect,
        data: &DataUpdate,
        released: bool,
    ) -> Result<Result<(Vec<(String, AttributeValue)>, Vec<String>), Outcome>, StoreError> {
        let layout = &self.inner.layout;
        let set = match data {
            DataUpdate::Keep => return Ok(Ok((Vec::new(), Vec::new()))),
            DataUpdate::Replace(_) if released => {
                return Err(StoreError::invalid(format!(
                    "lock {key}: with data kept as attributes a released record keeps no data; release without data"
                )));
            }
            DataUpdate::Replace(bytes) => {
                let mut set: Vec<_> = crate::attributes::attributes_from_data(layout, key, bytes)?
                    .into_iter()
                    .collect();
                set.sort_by(|a, b| a.0.cmp(&b.0));
                set
            }
            DataUpdate::Clear => Vec::new(),
        };
        // A vacant key is absent, or released with no data attributes (a
        // release removes them): nothing to remove.
        let Expect::Version(rvn) = expect else {
            return Ok(Ok((set, Vec::new())));
        };
        let Some(current) = self.get_raw_item(key).await? else {
            return Ok(Err(Outcome::Rejected { current: None }));
        };
        let record = self.record(&current)?;
        if record.rvn != *rvn {
            return Ok(Err(Outcome::Rejected {
                current: Some(record),
            }));
        }
        let remove = crate::attributes::data_names(layout, &current)
            .into_iter()
            .filter(|name| !set.iter().any(|(n, _)| n == name))
            .map(str::to_owned)
            .collect();
        Ok(Ok((set, remove)))
    }

    /// The `UpdateItem` that writes `new` under `key` if `expect` holds (an
    /// acquisition adds 1 to the fence): its expressions, for one request or
    /// one item of a transaction. `data_set` and `data_remove` are the data
    /// attributes of a layout that keeps data as attributes.
    fn prepare_update(
        &self,
        key: &LockKey,
        key_item: HashMap<String, AttributeValue>,
        expect: &Expect,
        new: &NewRecord,
        data_set: Vec<(String, AttributeValue)>,
        data_remove: Vec<String>,
    ) -> Result<PreparedUpdate, StoreError> {
        let layout = &self.inner.layout;
        let mut expr = Expr::default();
        let condition = match expect {
            Expect::Vacant => self.vacant_condition(&mut expr),
            Expect::Version(rvn) => self.version_condition(&mut expr, rvn),
        };
        let mut set = Vec::new();
        let mut remove = Vec::new();
        let owner = AttributeValue::S(new.owner.clone());
        let rvn = AttributeValue::S(new.rvn.as_str().to_owned());
        let (lease_name, lease_encoding) = layout.lease();
        let lease = item::encode_lease(lease_encoding, new.lease);
        let released = layout
            .released()
            .map(|(name, encoding)| (name, item::encode_released(encoding, new.released)));
        let data = new
            .data
            .bytes()
            .map(|bytes| AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(bytes)));
        let expires = self.expiry(new).map(|t| AttributeValue::N(t.to_string()));

        let mut sized: Vec<(&str, &AttributeValue)> = vec![
            (layout.owner(), &owner),
            (layout.rvn(), &rvn),
            (lease_name, &lease),
        ];
        set.push(format!("{} = :owner", expr.name("#owner", layout.owner())));
        expr.value(":owner", owner.clone());
        set.push(format!("{} = :rvn", expr.name("#rvn", layout.rvn())));
        expr.value(":rvn", rvn.clone());
        set.push(format!("{} = :lease", expr.name("#lease", lease_name)));
        expr.value(":lease", lease.clone());
        if let Some((name, value)) = &released {
            let placeholder = expr.name("#rel", name);
            match value {
                Some(value) => {
                    set.push(format!("{placeholder} = :rel"));
                    expr.value(":rel", value.clone());
                    sized.push((name, value));
                }
                None => remove.push(placeholder),
            }
        }
        // Data the write keeps is left out of the expression: the item keeps it.
        if let Some(name) = layout.data() {
            match (&new.data, &data) {
                (DataUpdate::Replace(_), Some(value)) => {
                    let placeholder = expr.name("#data", name);
                    set.push(format!("{placeholder} = :data"));
                    expr.value(":data", value.clone());
                    sized.push((name, value));
                }
                (DataUpdate::Clear, _) => remove.push(expr.name("#data", name)),
                _ => {}
            }
        }
        for (i, (name, value)) in data_set.iter().enumerate() {
            let placeholder = expr.name(&format!("#d{i}"), name);
            set.push(format!("{placeholder} = :d{i}"));
            expr.value(&format!(":d{i}"), value.clone());
            sized.push((name, value));
        }
        for (i, name) in data_remove.iter().enumerate() {
            remove.push(expr.name(&format!("#x{i}"), name));
        }
        if let Some(name) = layout.expires_at() {
            let placeholder = expr.name("#exp", name);
            match &expires {
                Some(value) => {
                    set.push(format!("{placeholder} = :exp"));
                    expr.value(":exp", value.clone());
                    sized.push((name, value));
                }
                None => remove.push(placeholder),
            }
        }
        // Read last, after the client counted its lease from the send.
        let written = layout
            .written()
            .and_then(|name| Some((name, item::written_now(new.rvn.as_str())?)));
        if let Some((name, value)) = &written {
            set.push(format!("{} = :written", expr.name("#written", name)));
            expr.value(":written", value.clone());
            sized.push((name, value));
        }
        self.check_size(key, &key_item, &sized, true)?;

        if new.fence == FenceUpdate::Next {
            // The next fence, or, on an item with none (never written, or
            // deleted by its time to live, a release that deletes, a
            // python-dynamodb-lock item, or by hand), the clock's floor: a
            // deleted key's fences go on above those a paused holder of the
            // deleted item still carries (FencesAfterDeletion::ClockFloor).
            let fence = expr.name("#fence", layout.fence());
            let below_floor = Fence::clock_floor().get().saturating_sub(1);
            expr.value(":one", AttributeValue::N("1".into()));
            expr.value(":floor", AttributeValue::N(below_floor.to_string()));
            set.push(format!("{fence} = if_not_exists({fence}, :floor) + :one"));
        }
        let mut update = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            update.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }

        let (names, values) = expr.values();
        Ok(PreparedUpdate {
            key: key_item,
            update,
            condition,
            names,
            values,
        })
    }

    async fn put_item(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let layout = &self.inner.layout;
        let key_item = item::key_item(layout, key)?;
        if new.data.bytes().is_some() && layout.data().is_none() && !layout.data_as_attributes() {
            return Err(StoreError::invalid(format!(
                "lock {key} carries data, but the table layout ({}) has no data attribute",
                layout.preset_name()
            )));
        }
        if new.rvn.as_str().is_empty() {
            return Err(StoreError::invalid("the record version number is empty"));
        }
        if new.released && layout.release_mode() == ReleaseMode::Delete {
            return self.release_by_delete(key, key_item, expect, new).await;
        }

        let (data_set, data_remove) = if layout.data_as_attributes() {
            // A released record keeps no data attributes (see
            // Layout::with_data_as_attributes): a release that keeps the data
            // clears it.
            let data = match &new.data {
                DataUpdate::Keep if new.released => &DataUpdate::Clear,
                data => data,
            };
            match self
                .data_attributes(key, &expect, data, new.released)
                .await?
            {
                Ok(attributes) => attributes,
                Err(rejected) => return Ok(rejected),
            }
        } else {
            (Vec::new(), Vec::new())
        };

        let update = self.prepare_update(key, key_item, &expect, &new, data_set, data_remove)?;
        let result = self
            .inner
            .client
            .update_item()
            .table_name(&self.inner.table)
            .set_key(Some(update.key))
            .update_expression(update.update)
            .condition_expression(update.condition)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(update.values)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .config_override(single_attempt())
            .send()
            .await;
        match result {
            Ok(output) => match output.attributes() {
                Some(item) if !item.is_empty() => Ok(Outcome::Applied(self.record(item)?)),
                // The write applied but the response lacks the new item: let the
                // client resolve it by RVN like any lost response.
                _ => Err(StoreError::ambiguous(format!(
                    "UpdateItem on DynamoDB table {:?} succeeded but returned no attributes for lock {key}",
                    self.inner.table
                ))),
            },
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && let UpdateItemError::ConditionalCheckFailedException(ccf) = service.err()
                {
                    return self.rejected(key, ccf.item()).await;
                }
                Err(map_sdk_error(err, Access::Write, self.ctx("UpdateItem")))
            }
        }
    }

    /// `put_many`: one `TransactWriteItems` of an `UpdateItem` per key, then
    /// `TransactGetItems` (one per 25 keys) that read the records it wrote
    /// (their fences), since a transaction returns none.
    async fn write_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        let layout = &self.inner.layout;
        if self.atomic_writes().is_none() {
            return Err(StoreError::invalid(format!(
                "table {:?} (layout {}) writes one key per request: the layout keeps data as attributes, which a write reads first, or the server has no transactions",
                self.inner.table,
                layout.preset_name()
            )));
        }
        if writes.len() > MAX_TRANSACTION_ITEMS {
            return Err(StoreError::invalid(format!(
                "{} writes in one request; a DynamoDB transaction takes at most {MAX_TRANSACTION_ITEMS}",
                writes.len()
            )));
        }
        let mut sorted: Vec<&LockKey> = writes.iter().map(|write| &write.key).collect();
        sorted.sort();
        if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StoreError::invalid(
                "a key written twice in one request: each key once",
            ));
        }
        let mut items = Vec::with_capacity(writes.len());
        let mut keys = Vec::with_capacity(writes.len());
        for write in &writes {
            let key = &write.key;
            if write.new.data.bytes().is_some() && layout.data().is_none() {
                return Err(StoreError::invalid(format!(
                    "lock {key} carries data, but the table layout ({}) has no data attribute",
                    layout.preset_name()
                )));
            }
            if write.new.rvn.as_str().is_empty() {
                return Err(StoreError::invalid("the record version number is empty"));
            }
            if write.new.released && layout.release_mode() == ReleaseMode::Delete {
                return Err(StoreError::invalid(format!(
                    "lock {key}: this table layout ({}) releases by deleting, one key per request",
                    layout.preset_name()
                )));
            }
            let key_item = item::key_item(layout, key)?;
            let prepared = self.prepare_update(
                key,
                key_item.clone(),
                &write.expect,
                &write.new,
                Vec::new(),
                Vec::new(),
            )?;
            let update = Update::builder()
                .table_name(&self.inner.table)
                .set_key(Some(prepared.key))
                .update_expression(prepared.update)
                .condition_expression(prepared.condition)
                .set_expression_attribute_names(Some(prepared.names))
                .set_expression_attribute_values(prepared.values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(|error| StoreError::invalid(format!("lock {key}: {error}")))?;
            items.push(TransactWriteItem::builder().update(update).build());
            keys.push(key_item);
        }
        // The same request sent again (by a retry this store does not make)
        // would be recognised by DynamoDB for ten minutes.
        let token: Option<String> = writes
            .first()
            .map(|write| write.new.rvn.as_str().chars().take(36).collect());
        let result = self
            .inner
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .set_client_request_token(token)
            .customize()
            .config_override(single_attempt())
            .send()
            .await;
        match result {
            Ok(_) => self.read_written(&writes, keys).await,
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && let TransactWriteItemsError::TransactionCanceledException(cancelled) =
                        service.err()
                {
                    let reasons = cancelled.cancellation_reasons();
                    if let Some(index) = reasons
                        .iter()
                        .position(|reason| reason.code() == Some("ConditionalCheckFailed"))
                    {
                        let current = reasons[index]
                            .item()
                            .filter(|item| !item.is_empty())
                            .map(|item| self.record(item))
                            .transpose()?;
                        return Ok(ManyOutcome::Rejected { index, current });
                    }
                    let codes: Vec<&str> = reasons
                        .iter()
                        .filter_map(|reason| reason.code())
                        .filter(|code| *code != "None")
                        .collect();
                    // Another transaction on one of the items, capacity: nothing
                    // was written, and trying again may work.
                    return Err(StoreError::unavailable(format!(
                        "DynamoDB cancelled the transaction on table {:?} ({}); nothing was written",
                        self.inner.table,
                        codes.join(", ")
                    )));
                }
                if crate::table::unsupported_operation(&err) {
                    // Nothing was written; from now on the store says it
                    // writes one key per request.
                    self.inner
                        .no_transactions
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(StoreError::invalid(format!(
                        "the server of table {:?} has no transactions (TransactWriteItems is an unknown operation there): it writes one key per request",
                        self.inner.table
                    )));
                }
                Err(map_sdk_error(
                    err,
                    Access::Write,
                    self.ctx("TransactWriteItems"),
                ))
            }
        }
    }

    /// The records a transaction that applied wrote, read back in consistent
    /// `TransactGetItems` of up to 25 keys (DynamoDB takes 100; some
    /// DynamoDB-compatible servers, moto among them, 25): each must carry its
    /// write's version. A read that fails leaves it to the caller to read
    /// them (ambiguous).
    async fn read_written(
        &self,
        writes: &[KeyedWrite],
        keys: Vec<HashMap<String, AttributeValue>>,
    ) -> Result<ManyOutcome, StoreError> {
        let unread = |why: String| {
            StoreError::ambiguous(format!(
                "TransactWriteItems on DynamoDB table {:?} applied, but reading back its records failed ({why})",
                self.inner.table
            ))
        };
        let mut records = Vec::with_capacity(writes.len());
        for (writes, keys) in writes
            .chunks(READ_BACK_ITEMS)
            .zip(keys.chunks(READ_BACK_ITEMS))
        {
            // Every failure from here on comes after the writes applied:
            // ambiguous, so the caller reads them (or releases them).
            let mut gets = Vec::with_capacity(keys.len());
            for key in keys {
                let get = Get::builder()
                    .table_name(&self.inner.table)
                    .set_key(Some(key.clone()))
                    .build()
                    .map_err(|error| unread(error.to_string()))?;
                gets.push(TransactGetItem::builder().get(get).build());
            }
            let output = self
                .inner
                .client
                .transact_get_items()
                .set_transact_items(Some(gets))
                .send()
                .await
                .map_err(|err| {
                    unread(
                        map_sdk_error(err, Access::Read, self.ctx("TransactGetItems")).to_string(),
                    )
                })?;
            if output.responses().len() != writes.len() {
                return Err(unread("fewer records than writes".into()));
            }
            for (write, response) in writes.iter().zip(output.responses()) {
                let record = response
                    .item()
                    .filter(|item| !item.is_empty())
                    .map(|item| self.record(item))
                    .transpose()
                    .map_err(|error| unread(error.message().to_owned()))?
                    .filter(|record| record.rvn == write.new.rvn)
                    .ok_or_else(|| {
                        unread(format!("lock {} does not carry its write", write.key))
                    })?;
                records.push(record);
            }
        }
        Ok(ManyOutcome::Applied(records))
    }

    /// What one `put_many` may write on this table: none where the layout
    /// keeps data as attributes (a write reads the item first), nor on a
    /// server found to have no transactions.
    fn atomic_writes(&self) -> Option<AtomicWrites> {
        let no_transactions = self
            .inner
            .no_transactions
            .load(std::sync::atomic::Ordering::Relaxed);
        (!self.inner.layout.data_as_attributes() && !no_transactions)
            .then(|| AtomicWrites::new(MAX_TRANSACTION_ITEMS, MAX_TRANSACTION_BYTES))
    }

    async fn delete_item(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let layout = &self.inner.layout;
        let key_item = item::key_item(layout, key)?;
        let mut expr = Expr::default();
        let condition = match &expect {
            Expect::Version(rvn) => self.version_condition(&mut expr, rvn),
            Expect::Vacant => {
                let pk = expr.name("#pk", layout.partition_key());
                match layout.released() {
                    Some((name, encoding)) => {
                        let rel = expr.name("#rel", name);
                        let marker = expr.value(":released", item::released_marker(encoding));
                        format!("attribute_exists({pk}) AND {rel} = {marker}")
                    }
                    // Nothing is ever vacant in a layout without a released
                    // attribute: reject, returning the current item in the same call.
                    None => format!("attribute_exists({pk}) AND attribute_not_exists({pk})"),
                }
            }
        };
        let (names, values) = expr.values();
        let result = self
            .inner
            .client
            .delete_item()
            .table_name(&self.inner.table)
            .set_key(Some(key_item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(values)
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .config_override(single_attempt())
            .send()
            .await;
        match result {
            Ok(output) => match output.attributes() {
                Some(item) if !item.is_empty() => Ok(Outcome::Applied(self.record(item)?)),
                _ => Err(StoreError::ambiguous(format!(
                    "DeleteItem on DynamoDB table {:?} succeeded but returned no attributes for lock {key}",
                    self.inner.table
                ))),
            },
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && let DeleteItemError::ConditionalCheckFailedException(ccf) = service.err()
                {
                    return self.rejected(key, ccf.item()).await;
                }
                Err(map_sdk_error(err, Access::Write, self.ctx("DeleteItem")))
            }
        }
    }

    async fn list_items(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let layout = &self.inner.layout;
        if limit == 0 {
            return Err(StoreError::invalid(
                "a listing page needs a limit of at least 1",
            ));
        }
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let start = cursor
            .as_ref()
            .map(|c| item::decode_cursor(layout, c))
            .transpose()?;
        let (items, last) = match partition {
            Some(partition) => {
                item::check_key(layout, &LockKey::new(partition))?;
                let output = self
                    .inner
                    .client
                    .query()
                    .table_name(&self.inner.table)
                    .key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", layout.partition_key())
                    .expression_attribute_values(":pk", AttributeValue::S(partition.to_owned()))
                    .consistent_read(true)
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| map_sdk_error(err, Access::Read, self.ctx("Query")))?;
                (
                    output.items().to_vec(),
                    output.last_evaluated_key().cloned(),
                )
            }
            None => {
                let output = self
                    .inner
                    .client
                    .scan()
                    .table_name(&self.inner.table)
                    .consistent_read(true)
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| map_sdk_error(err, Access::Read, self.ctx("Scan")))?;
                (
                    output.items().to_vec(),
                    output.last_evaluated_key().cloned(),
                )
            }
        };
        let mut records = Vec::with_capacity(items.len());
        for item in &items {
            match self.record(item) {
                Ok(record) => records.push(record),
                Err(err) => {
                    tracing::warn!(table = %self.inner.table, error = %err, "skipping an item that is not a lock record");
                }
            }
        }
        let next = last
            .filter(|last| !last.is_empty())
            .and_then(|last| item::encode_cursor(layout, &last));
        Ok(Page { records, next })
    }
}

#[async_trait]
impl ConditionalStore for DynamoDbStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let result = self.get_item(key).await;
        self.explain(result).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let result = self.put_item(key, expect, new).await;
        self.explain(result).await
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let result = self.delete_item(key, expect).await;
        self.explain(result).await
    }

    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        let result = self.write_many(writes).await;
        self.explain(result).await
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        // A scan of a table with another key schema does not fail: it finds
        // no lock records, and an empty listing would hide the mistake.
        if partition.is_none()
            && let Some(mismatch) = self.schema_mismatch().await
        {
            return Err(StoreError::invalid(
                "a scan finds no lock records in a table with another key schema",
            )
            .with_source(mismatch));
        }
        let result = self.list_items(partition, cursor, limit).await;
        self.explain(result).await
    }

    fn capabilities(&self) -> Capabilities {
        let layout = &self.inner.layout;
        item::limits(layout)
            .with_returns_current_on_conflict(true)
            .with_keeps_released_records(layout.release_mode() == ReleaseMode::MarkReleased)
            .with_fences_after_deletion(FencesAfterDeletion::ClockFloor)
            .with_stores_expiry(layout.expires_at.is_some())
            .with_clock(match layout.written() {
                Some(_) => StoreClock::Wall {
                    granularity: Duration::from_millis(1),
                },
                None => StoreClock::None,
            })
            .with_atomic_writes(self.atomic_writes())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn endpoints_with_a_bad_port_or_scheme_are_refused() {
        for good in [
            "http://127.0.0.1:5000",
            "https://dynamodb.eu-west-1.amazonaws.com",
            "http://localhost:8000/",
            "http://[::1]:8000",
            "http://[::1]",
        ] {
            assert_eq!(validate_endpoint(good), Ok(()), "{good}");
        }
        for bad in [
            "http://127.0.0.1:99999",
            "http://127.0.0.1:0",
            "http://127.0.0.1:port",
            "127.0.0.1:5000",
            "ftp://host",
            "http://",
            "http://:5000",
        ] {
            assert!(
                matches!(
                    validate_endpoint(bad),
                    Err(StoreConfigError::InvalidEndpoint { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_builder_refuses_a_bad_endpoint() {
        let config = aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
        let error = DynamoDbStore::builder("locks")
            .endpoint_url("http://127.0.0.1:99999")
            .build_with_config(config)
            .unwrap_err();
        assert!(error.to_string().contains("65535"), "{error}");
    }

    /// Stalled-stream protection watches every request and response body with
    /// timers; its 5 s grace is longer than the attempt timeout the store
    /// always sets (2 s by default), so it could never act first: it is off.
    #[test]
    fn stalled_stream_protection_is_off_and_the_attempt_timeout_covers_stalls() {
        let config = aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
        let store = DynamoDbStore::builder("locks")
            .build_with_config(config)
            .unwrap();
        let config = store.client().config();
        let protection = config.stalled_stream_protection().unwrap();
        assert!(!protection.is_enabled());
        assert_eq!(
            config.timeout_config().unwrap().operation_attempt_timeout(),
            Some(Timeouts::default().attempt)
        );
    }
}
