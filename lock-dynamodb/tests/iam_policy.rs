//! The least-privilege IAM policies of docs/dynamodb.md, and the actions the
//! store tells a refused caller to allow (`ACTIONS` and `TABLE_ACTIONS` in
//! src/mapping.rs), against the DynamoDB calls this crate actually makes.
//!
//! The calls are found in the crate's own source: every `.operation()` of the
//! SDK client (`.update_item()`, `.describe_table()`, …) outside test code, and
//! which functions reach it. The lock operations are the methods of
//! `impl ConditionalStore for DynamoDbStore` and every function of the crate
//! they name, transitively; table creation and validation are `create_table`
//! and `validate_table` and what they name. A policy that grants an action its
//! calls never make, or misses one they do make, fails here, and so does a
//! message that names other actions than the policy. No server needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The DynamoDB guide, whose policy section is checked.
const GUIDE: &str = include_str!("../../docs/dynamodb.md");
const POLICY_HEADING: &str = "## Least-privilege IAM policy";
/// The statement of what the lock operations call.
const LOCKS_SID: &str = "LeaseLocks";
/// The statement of what table creation and validation call.
const TABLE_SID: &str = "LockTableSetup";

/// Every operation of the DynamoDB API, as the SDK client names the method that
/// starts a request (aws-sdk-dynamodb 1.x).
const OPERATIONS: &[&str] = &[
    "batch_execute_statement",
    "batch_get_item",
    "batch_write_item",
    "create_backup",
    "create_global_table",
    "create_table",
    "delete_backup",
    "delete_item",
    "delete_resource_policy",
    "delete_table",
    "describe_backup",
    "describe_continuous_backups",
    "describe_contributor_insights",
    "describe_endpoints",
    "describe_export",
    "describe_global_table",
    "describe_global_table_settings",
    "describe_import",
    "describe_kinesis_streaming_destination",
    "describe_limits",
    "describe_table",
    "describe_table_replica_auto_scaling",
    "describe_time_to_live",
    "disable_kinesis_streaming_destination",
    "enable_kinesis_streaming_destination",
    "execute_statement",
    "execute_transaction",
    "export_table_to_point_in_time",
    "get_item",
    "get_resource_policy",
    "import_table",
    "list_backups",
    "list_contributor_insights",
    "list_exports",
    "list_global_tables",
    "list_imports",
    "list_tables",
    "list_tags_of_resource",
    "put_item",
    "put_resource_policy",
    "query",
    "restore_table_from_backup",
    "restore_table_to_point_in_time",
    "scan",
    "search_vectors",
    "tag_resource",
    "transact_get_items",
    "transact_write_items",
    "untag_resource",
    "update_continuous_backups",
    "update_contributor_insights",
    "update_global_table",
    "update_global_table_settings",
    "update_item",
    "update_kinesis_streaming_destination",
    "update_table",
    "update_table_replica_auto_scaling",
    "update_time_to_live",
];

/// Operations whose IAM actions are not their own names (PartiQL statements
/// and transactions are authorised per item action): a policy for them has to
/// be worked out by hand, so the test stops if the crate starts using one.
const NOT_THEIR_OWN_ACTION: &[&str] = &[
    "batch_execute_statement",
    "execute_statement",
    "execute_transaction",
    "search_vectors",
];

/// Operations whose IAM action is worked out by hand: a transaction is
/// authorised per item action, and the store's `TransactWriteItems` holds only
/// `Update` items (`put_many`, `lock-dynamodb/src/store.rs`), its
/// `TransactGetItems` only `Get` items.
const BY_HAND: &[(&str, &str)] = &[
    ("transact_write_items", "UpdateItem"),
    ("transact_get_items", "GetItem"),
];

/// Methods of the SDK client that send nothing.
const CLIENT_METHODS: &[&str] = &["config", "clone"];

// ---------------------------------------------------------------------------
// A small Rust tokenizer: identifiers and punctuation, with comments, string
// and character literals out of the way, so that `.scan()` in a doc comment or
// a message is not a call, and a `'{'` does not unbalance the braces.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Punct(char),
    Literal,
}

fn skip_quoted(chars: &[char], mut i: usize) -> usize {
    // `chars[i]` is the opening quote.
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// A character literal starting at the quote `chars[i]`, or `None` for a
/// lifetime.
fn skip_char(chars: &[char], i: usize) -> Option<usize> {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        Some(j + 1)
    } else if chars.get(i + 2) == Some(&'\'') {
        Some(i + 3)
    } else {
        None
    }
}

fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_quoted(&chars, i);
            tokens.push(Token::Literal);
        } else if c == '\'' {
            match skip_char(&chars, i) {
                Some(end) => {
                    i = end;
                    tokens.push(Token::Literal);
                }
                None => {
                    tokens.push(Token::Punct('\''));
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Literal);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = chars[i..].iter().take_while(|c| **c == '#').count();
            match (word.as_str(), chars.get(i), chars.get(i + hashes)) {
                // Raw strings: r"…", r#"…"#, br"…", cr"…".
                ("r" | "br" | "cr", _, Some('"')) => {
                    let mut j = i + hashes + 1;
                    while j < chars.len()
                        && !(chars[j] == '"'
                            && chars[j + 1..].iter().take_while(|c| **c == '#').count() >= hashes)
                    {
                        j += 1;
                    }
                    i = j + 1 + hashes;
                    tokens.push(Token::Literal);
                }
                // A raw identifier: r#type.
                ("r", Some('#'), _) if hashes == 1 => {
                    let start = i + 1;
                    i = start;
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                    tokens.push(Token::Ident(chars[start..i].iter().collect()));
                }
                // b"…", c"…".
                ("b" | "c", Some('"'), _) => {
                    i = skip_quoted(&chars, i);
                    tokens.push(Token::Literal);
                }
                // b'x'.
                ("b", Some('\''), _) => {
                    i = skip_char(&chars, i).unwrap_or(i + 1);
                    tokens.push(Token::Literal);
                }
                _ => tokens.push(Token::Ident(word)),
            }
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

fn is_ident(token: Option<&Token>, name: &str) -> bool {
    matches!(token, Some(Token::Ident(word)) if word == name)
}

fn is_punct(token: Option<&Token>, c: char) -> bool {
    token == Some(&Token::Punct(c))
}

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces");
}

/// The first `{` or `;` from `from` outside parentheses and brackets.
fn item_end(tokens: &[Token], from: usize) -> Option<(usize, char)> {
    let mut depth = 0i32;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        match token {
            Token::Punct('(' | '[') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct(c @ ('{' | ';')) if depth == 0 => return Some((i, *c)),
            _ => {}
        }
    }
    None
}

/// `tokens` without the items marked `#[cfg(test)]`.
fn without_tests(tokens: &[Token]) -> Vec<Token> {
    let attribute = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    let mut kept = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].starts_with(&attribute) {
            i = match item_end(tokens, i + attribute.len()) {
                Some((end, ';')) => end + 1,
                Some((open, _)) => matching_brace(tokens, open) + 1,
                None => tokens.len(),
            };
        } else {
            kept.push(tokens[i].clone());
            i += 1;
        }
    }
    kept
}

/// `.operation()` at `i` (the dot): the operation.
fn sdk_call(tokens: &[Token], i: usize) -> Option<&'static str> {
    if !is_punct(tokens.get(i), '.')
        || !is_punct(tokens.get(i + 2), '(')
        || !is_punct(tokens.get(i + 3), ')')
    {
        return None;
    }
    match tokens.get(i + 1) {
        Some(Token::Ident(name)) => OPERATIONS.iter().copied().find(|op| op == name),
        _ => None,
    }
}

/// What the crate's source says, outside test code.
#[derive(Debug, Default)]
struct Crate {
    /// Every function body, by the function's name (same-named functions of
    /// different types share an entry: a call by name may reach any of them).
    bodies: BTreeMap<String, Vec<Vec<Token>>>,
    /// The functions of `impl ConditionalStore for DynamoDbStore`.
    store_methods: BTreeSet<String>,
    /// Every SDK operation called anywhere.
    operations: BTreeSet<&'static str>,
    /// Methods called on something named `client` that are not operations.
    client_methods: BTreeSet<String>,
}

impl Crate {
    fn add_file(&mut self, source: &str) {
        let tokens = without_tests(&tokenize(source));
        for i in 0..tokens.len() {
            if let Some(op) = sdk_call(&tokens, i) {
                self.operations.insert(op);
            }
            // client.x(), client().x(), .client.x()
            if is_ident(tokens.get(i), "client") {
                let dot = if is_punct(tokens.get(i + 1), '(') && is_punct(tokens.get(i + 2), ')') {
                    i + 3
                } else {
                    i + 1
                };
                if is_punct(tokens.get(dot), '.')
                    && is_punct(tokens.get(dot + 2), '(')
                    && let Some(Token::Ident(method)) = tokens.get(dot + 1)
                    && !OPERATIONS.contains(&method.as_str())
                {
                    self.client_methods.insert(method.clone());
                }
            }
            if is_ident(tokens.get(i), "fn")
                && let Some(Token::Ident(name)) = tokens.get(i + 1)
                && let Some((open, '{')) = item_end(&tokens, i + 2)
            {
                let close = matching_brace(&tokens, open);
                self.bodies
                    .entry(name.clone())
                    .or_default()
                    .push(tokens[open..=close].to_vec());
            }
            if is_ident(tokens.get(i), "ConditionalStore")
                && is_ident(tokens.get(i + 1), "for")
                && is_ident(tokens.get(i + 2), "DynamoDbStore")
                && let Some((open, '{')) = item_end(&tokens, i + 3)
            {
                let close = matching_brace(&tokens, open);
                for j in open..close {
                    if is_ident(tokens.get(j), "fn")
                        && let Some(Token::Ident(name)) = tokens.get(j + 1)
                    {
                        self.store_methods.insert(name.clone());
                    }
                }
            }
        }
    }

    fn read(dir: &Path) -> Self {
        let mut krate = Self::default();
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    krate.add_file(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        krate
    }

    /// The SDK operations `roots` call, directly or through any function of the
    /// crate they name, with the functions that make each call.
    fn reached_from(&self, roots: &[&str]) -> BTreeMap<&'static str, BTreeSet<String>> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut todo: Vec<String> = roots.iter().map(|r| (*r).to_owned()).collect();
        let mut calls: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            for body in self.bodies.get(&name).into_iter().flatten() {
                for i in 0..body.len() {
                    if let Some(op) = sdk_call(body, i) {
                        calls.entry(op).or_default().insert(name.clone());
                    }
                    // Any mention of a function of the crate may call it
                    // (`self.get_item(key)`, `Self::describe`, `.map(record)`),
                    // except the SDK call itself and a nested definition.
                    if let Some(Token::Ident(word)) = body.get(i)
                        && self.bodies.contains_key(word)
                        && !is_ident(i.checked_sub(1).and_then(|p| body.get(p)), "fn")
                        && !(i > 0 && sdk_call(body, i - 1).is_some())
                        && !seen.contains(word)
                    {
                        todo.push(word.clone());
                    }
                }
            }
        }
        calls
    }
}

/// `update_time_to_live` → `UpdateTimeToLive`.
fn action(operation: &str) -> String {
    if let Some((_, action)) = BY_HAND.iter().find(|(op, _)| *op == operation) {
        return (*action).to_owned();
    }
    assert!(
        !NOT_THEIR_OWN_ACTION.contains(&operation),
        "the store calls {operation}, whose IAM actions are not its own name: \
         write its policy by hand and teach this test"
    );
    operation
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            let first = chars.next().unwrap().to_ascii_uppercase();
            std::iter::once(first).chain(chars).collect::<String>()
        })
        .collect()
}

fn actions(calls: &BTreeMap<&'static str, BTreeSet<String>>) -> BTreeMap<String, String> {
    calls
        .iter()
        .map(|(op, callers)| {
            let callers: Vec<&str> = callers.iter().map(String::as_str).collect();
            (action(op), callers.join(", "))
        })
        .collect()
}

fn source() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

// ---------------------------------------------------------------------------
// The guide's policy section.

/// The lines of the policy section, up to the next `## ` heading.
fn policy_section() -> Vec<&'static str> {
    let mut lines = GUIDE
        .lines()
        .skip_while(|line| line.trim_end() != POLICY_HEADING);
    assert!(
        lines.next().is_some(),
        "docs/dynamodb.md has no {POLICY_HEADING:?} section"
    );
    lines.take_while(|line| !line.starts_with("## ")).collect()
}

/// The statements of every JSON block of the section: `Sid` → actions, each
/// checked to be an `Allow` on one table, without wildcards or repeats.
fn statements() -> BTreeMap<String, BTreeSet<String>> {
    let section = policy_section();
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in section {
        match &mut block {
            None if line.trim_start().starts_with("```json") => block = Some(String::new()),
            Some(text) if line.trim() == "```" => {
                blocks.push(std::mem::take(text));
                block = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    assert!(
        !blocks.is_empty(),
        "no JSON policy under {POLICY_HEADING:?}"
    );
    let mut statements = BTreeMap::new();
    for block in blocks {
        let policy: serde_json::Value = serde_json::from_str(&block)
            .unwrap_or_else(|e| panic!("a policy in docs/dynamodb.md is not JSON ({e}):\n{block}"));
        assert_eq!(policy["Version"], "2012-10-17", "{block}");
        for statement in policy["Statement"].as_array().expect("a Statement list") {
            let sid = statement["Sid"]
                .as_str()
                .expect("every statement has a Sid");
            assert_eq!(statement["Effect"], "Allow", "{sid}");
            let resource = statement["Resource"].as_str().unwrap_or_default();
            assert!(
                resource.starts_with("arn:aws:dynamodb:") && resource.contains(":table/"),
                "{sid} should name the lock table, not {resource:?}"
            );
            let listed: Vec<String> = match &statement["Action"] {
                serde_json::Value::String(one) => vec![one.clone()],
                serde_json::Value::Array(many) => many
                    .iter()
                    .map(|a| a.as_str().expect("actions are strings").to_owned())
                    .collect(),
                other => panic!("{sid}: Action is {other}"),
            };
            let mut actions = BTreeSet::new();
            for granted in listed {
                let name = granted
                    .strip_prefix("dynamodb:")
                    .unwrap_or_else(|| panic!("{sid} grants {granted}, not a DynamoDB action"));
                assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric()),
                    "{sid} grants {granted}: name each action, no wildcards"
                );
                assert!(
                    actions.insert(name.to_owned()),
                    "{sid} grants {granted} twice"
                );
            }
            assert!(
                statements.insert(sid.to_owned(), actions).is_none(),
                "two statements are called {sid}"
            );
        }
    }
    statements
}

/// A const `&str` of src/mapping.rs, as a set of actions ("A, B and C").
fn message_actions(name: &str) -> BTreeSet<String> {
    let mapping =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/mapping.rs"))
            .unwrap();
    let start = format!("const {name}: &str = \"");
    let at = mapping
        .find(&start)
        .unwrap_or_else(|| panic!("src/mapping.rs has no {start}…\""))
        + start.len();
    let text = &mapping[at..at + mapping[at..].find('"').unwrap()];
    text.replace(" and ", ", ")
        .split(", ")
        .map(|a| a.trim().to_owned())
        .collect()
}

/// Compare what is granted with what is called, both ways.
fn check(what: &str, granted: &BTreeSet<String>, called: &BTreeMap<String, String>) {
    let mut problems = Vec::new();
    for action in granted {
        if !called.contains_key(action) {
            problems.push(format!("{what} grants {action}, which they never call"));
        }
    }
    for (action, callers) in called {
        if !granted.contains(action) {
            problems.push(format!("{what} misses {action}, called by {callers}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------

#[test]
fn the_policy_for_taking_locks_grants_exactly_what_the_lock_operations_call() {
    let krate = source();
    for method in ["get", "put", "delete", "list"] {
        assert!(
            krate.store_methods.contains(method),
            "impl ConditionalStore for DynamoDbStore not found, or without {method}: {:?}",
            krate.store_methods
        );
    }
    let roots: Vec<&str> = krate.store_methods.iter().map(String::as_str).collect();
    grants_exactly_what_is_called(
        &krate,
        &roots,
        &["GetItem", "UpdateItem", "DeleteItem"],
        (LOCKS_SID, "ACTIONS"),
        "for the lock operations",
    );
}

#[test]
fn the_policy_for_the_table_grants_exactly_what_creating_and_validating_it_call() {
    let krate = source();
    for method in ["create_table", "validate_table"] {
        assert!(krate.bodies.contains_key(method), "no fn {method}");
    }
    grants_exactly_what_is_called(
        &krate,
        &["create_table", "validate_table"],
        &["CreateTable", "DescribeTable"],
        (TABLE_SID, "TABLE_ACTIONS"),
        "for create_table and validate_table",
    );
}

/// The docs' statement `sid` and mapping.rs's constant `constant` name
/// exactly the actions reached from `roots`, among which `needed` (so the
/// scan found the calls at all).
fn grants_exactly_what_is_called(
    krate: &Crate,
    roots: &[&str],
    needed: &[&str],
    (sid, constant): (&str, &str),
    what: &str,
) {
    let called = actions(&krate.reached_from(roots));
    for needed in needed {
        assert!(
            called.contains_key(*needed),
            "{needed} not found in {called:?}"
        );
    }
    let statements = statements();
    let granted = statements
        .get(sid)
        .unwrap_or_else(|| panic!("no {sid} statement in docs/dynamodb.md"));
    check(
        &format!("docs/dynamodb.md's {sid} statement, {what},"),
        granted,
        &called,
    );
    check(
        &format!("src/mapping.rs's {constant}, {what},"),
        &message_actions(constant),
        &called,
    );
}

#[test]
fn every_call_the_crate_makes_is_in_a_policy_or_named_beside_them() {
    let krate = source();
    assert!(
        krate
            .client_methods
            .iter()
            .all(|m| CLIENT_METHODS.contains(&m.as_str())),
        "the SDK client is called for {:?}: if that is a DynamoDB operation, add it to \
         OPERATIONS (and to the policy), otherwise to CLIENT_METHODS",
        krate.client_methods
    );
    let statements = statements();
    assert_eq!(
        statements.keys().map(String::as_str).collect::<Vec<_>>(),
        [LOCKS_SID, TABLE_SID],
        "the policy section has one statement for the locks and one for the table"
    );
    let granted: BTreeSet<&String> = statements.values().flatten().collect();
    let section = policy_section().join("\n");
    for op in &krate.operations {
        let action = action(op);
        assert!(
            granted.contains(&action) || section.contains(&format!("`{action}`")),
            "the crate calls {action} ({op}), which the policy section never mentions"
        );
    }
    // Nothing a policy grants is something the crate never calls.
    let called: BTreeSet<String> = krate.operations.iter().map(|op| action(op)).collect();
    for action in granted {
        assert!(called.contains(action), "dynamodb:{action} is never called");
    }
}

// ---------------------------------------------------------------------------
// The scanner itself.

#[test]
fn the_scanner_sees_calls_not_comments_strings_or_tests() {
    let source = r####"
        //! `.scan()` in a comment is no call
        /* nor .put_item() /* nested .query() */ here */
        const TEXT: &str = "client.put_item() in a message";
        const RAW: &str = r#"a .batch_write_item() "quoted" in a raw string"#;
        const BRACE: char = '{';
        struct S<'a>(&'a str);
        impl ConditionalStore for DynamoDbStore {
            async fn get(&self) { self.helper(b'}').await }
            fn capabilities(&self) -> Capabilities { Capabilities::default() }
        }
        impl DynamoDbStore {
            async fn helper(&self, _: u8) -> [u8; 2] { self.inner.client.get_item().send().await; [0; 2] }
            async fn admin(&self) { self.client().create_table().send().await; self.client().config(); }
        }
        #[cfg(test)]
        mod tests {
            fn t() { client.delete_table(); }
        }
    "####;
    let mut krate = Crate::default();
    krate.add_file(source);
    assert_eq!(
        krate.operations,
        BTreeSet::from(["get_item", "create_table"]),
        "{krate:?}"
    );
    assert_eq!(
        krate.store_methods,
        BTreeSet::from(["get".to_owned(), "capabilities".to_owned()])
    );
    assert_eq!(krate.client_methods, BTreeSet::from(["config".to_owned()]));
    let reached = krate.reached_from(&["get", "capabilities"]);
    assert_eq!(reached.keys().copied().collect::<Vec<_>>(), ["get_item"]);
    assert_eq!(reached["get_item"], BTreeSet::from(["helper".to_owned()]));
    assert_eq!(action("describe_time_to_live"), "DescribeTimeToLive");
}
