//! Data kept as top-level attributes of the item
//! ([`Layout::with_data_as_attributes`]): the data is a JSON object of
//! DynamoDB attribute values in the service's wire format, and every attribute
//! of an item that the layout does not name belongs to it.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_types::base64;
use lock_core::{LockKey, StoreError};
use serde_json::{Map, Value};

use crate::Layout;

/// An item's attributes by name, as DynamoDB holds them (`item.rs`, which
/// reads a record's data through this module, calls it `Item` too).
type Item = HashMap<String, AttributeValue>;

/// The names of an item's attributes that are data: all but the layout's own.
pub(crate) fn data_names<'a>(layout: &Layout, item: &'a Item) -> Vec<&'a str> {
    let own = layout.attributes();
    let mut names: Vec<&str> = item
        .keys()
        .map(String::as_str)
        .filter(|name| !own.iter().any(|(_, n)| n == name))
        .collect();
    names.sort_unstable();
    names
}

/// The data an item holds: its attributes that the layout does not name, as a
/// JSON object (members in name order); `None` when it has none.
pub(crate) fn data_from_item(layout: &Layout, item: &Item) -> Option<Vec<u8>> {
    let members: BTreeMap<&str, Value> = data_names(layout, item)
        .into_iter()
        .filter_map(|name| Some((name, to_json(item.get(name)?)?)))
        .collect();
    if members.is_empty() {
        return None;
    }
    serde_json::to_vec(&members).ok()
}

/// The attributes `data` stands for, checked: a JSON object of attribute
/// values, none named like an attribute of the layout.
pub(crate) fn attributes_from_data(
    layout: &Layout,
    key: &LockKey,
    data: &[u8],
) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let bad = |why: String| {
        StoreError::invalid(format!(
            "the data of lock {key} cannot be stored as attributes: {why}; with data kept as \
             attributes it is a JSON object of DynamoDB attribute values, such as \
             {{\"job\": {{\"S\": \"nightly\"}}, \"tries\": {{\"N\": \"3\"}}}}"
        ))
    };
    let members: Map<String, Value> = match serde_json::from_slice(data) {
        Ok(Value::Object(members)) => members,
        Ok(_) => return Err(bad("it is not a JSON object".into())),
        Err(err) => return Err(bad(format!("it is not JSON ({err})"))),
    };
    let own = layout.attributes();
    let mut out = HashMap::with_capacity(members.len());
    for (name, value) in members {
        if name.is_empty() {
            return Err(bad("an attribute name is empty".into()));
        }
        if let Some((role, _)) = own.iter().find(|(_, n)| *n == name) {
            return Err(bad(format!(
                "{name:?} is the layout's {role} attribute; rename that member"
            )));
        }
        let value = from_json(&value).map_err(|why| bad(format!("member {name:?}: {why}")))?;
        out.insert(name, value);
    }
    Ok(out)
}

/// An attribute value in the wire format's JSON; `None` for a kind this crate
/// does not know (left out of the data rather than misread).
fn to_json(value: &AttributeValue) -> Option<Value> {
    let (tag, inner) = match value {
        AttributeValue::S(s) => ("S", Value::String(s.clone())),
        AttributeValue::N(n) => ("N", Value::String(n.clone())),
        AttributeValue::B(b) => ("B", Value::String(base64::encode(b.as_ref()))),
        AttributeValue::Bool(b) => ("BOOL", Value::Bool(*b)),
        AttributeValue::Null(_) => ("NULL", Value::Bool(true)),
        AttributeValue::M(m) => {
            let members: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), to_json(v)?)))
                .collect();
            ("M", Value::Object(members))
        }
        AttributeValue::L(l) => ("L", Value::Array(l.iter().filter_map(to_json).collect())),
        AttributeValue::Ss(v) => ("SS", strings(v)),
        AttributeValue::Ns(v) => ("NS", strings(v)),
        AttributeValue::Bs(v) => (
            "BS",
            Value::Array(
                v.iter()
                    .map(|b| Value::String(base64::encode(b.as_ref())))
                    .collect(),
            ),
        ),
        _ => return None,
    };
    let mut object = Map::with_capacity(1);
    object.insert(tag.to_owned(), inner);
    Some(Value::Object(object))
}

fn strings(values: &[String]) -> Value {
    Value::Array(values.iter().cloned().map(Value::String).collect())
}

/// An attribute value from the wire format's JSON, checked as DynamoDB would
/// (numbers, non-empty sets without duplicates), so that a bad value is refused
/// before anything is sent.
fn from_json(value: &Value) -> Result<AttributeValue, String> {
    let object = match value {
        Value::Object(object) if object.len() == 1 => object,
        _ => return Err("not an object with exactly one type tag, such as {\"S\": \"x\"}".into()),
    };
    let Some((tag, inner)) = object.iter().next() else {
        return Err("no type tag".into());
    };
    let text = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(format!("{tag} takes a string")),
    };
    let number = |v: &Value| {
        let n = text(v)?;
        if n.trim().parse::<f64>().is_ok_and(f64::is_finite) {
            Ok(n)
        } else {
            Err(format!("{n:?} is not a number"))
        }
    };
    let binary = |v: &Value| {
        base64::decode(text(v)?)
            .map(Blob::new)
            .map_err(|_| format!("{tag} takes base64"))
    };
    let list = |v: &Value| match v {
        Value::Array(items) => Ok(items.clone()),
        _ => Err(format!("{tag} takes a list")),
    };
    let set = |v: &Value| {
        let items = list(v)?;
        if items.is_empty() {
            return Err(format!("an {tag} set cannot be empty"));
        }
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                return Err(format!("an {tag} set cannot hold {item} twice"));
            }
        }
        Ok(items)
    };
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text(inner)?),
        "N" => AttributeValue::N(number(inner)?),
        "B" => AttributeValue::B(binary(inner)?),
        "BOOL" => match inner {
            Value::Bool(b) => AttributeValue::Bool(*b),
            _ => return Err("BOOL takes true or false".into()),
        },
        "NULL" => AttributeValue::Null(true),
        "M" => match inner {
            Value::Object(members) => AttributeValue::M(
                members
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), from_json(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
            _ => return Err("M takes an object".into()),
        },
        "L" => AttributeValue::L(
            list(inner)?
                .iter()
                .map(from_json)
                .collect::<Result<_, _>>()?,
        ),
        "SS" => AttributeValue::Ss(set(inner)?.iter().map(text).collect::<Result<_, _>>()?),
        "NS" => AttributeValue::Ns(set(inner)?.iter().map(number).collect::<Result<_, _>>()?),
        "BS" => AttributeValue::Bs(set(inner)?.iter().map(binary).collect::<Result<_, _>>()?),
        other => return Err(format!("unknown type tag {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn layout() -> Layout {
        Layout::python_dynamodb_lock().with_data_as_attributes()
    }

    #[test]
    fn every_kind_round_trips_through_an_item() {
        let data = br#"{"b":{"B":"aGk="},"bool":{"BOOL":true},"bs":{"BS":["AA==","AQ=="]},"l":{"L":[{"S":"x"},{"N":"2"}]},"m":{"M":{"k":{"NULL":true}}},"n":{"N":"-1.5e3"},"ns":{"NS":["1","2"]},"null":{"NULL":true},"s":{"S":"text"},"ss":{"SS":["a","b"]}}"#;
        let key = LockKey::new("k");
        let attributes = attributes_from_data(&layout(), &key, data).unwrap();
        assert_eq!(
            attributes["b"],
            AttributeValue::B(Blob::new(b"hi".to_vec()))
        );
        assert_eq!(attributes["n"], AttributeValue::N("-1.5e3".into()));
        let mut item: Item = attributes;
        item.insert("lock_key".into(), AttributeValue::S("k".into()));
        item.insert("fence".into(), AttributeValue::N("3".into()));
        let back = data_from_item(&layout(), &item).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&back).unwrap(),
            serde_json::from_slice::<Value>(data).unwrap()
        );
        assert_eq!(data_names(&layout(), &item).len(), 10);
    }

    #[test]
    fn an_item_with_only_the_layouts_attributes_has_no_data() {
        let mut item = Item::new();
        item.insert("lock_key".into(), AttributeValue::S("k".into()));
        item.insert("owner_name".into(), AttributeValue::S("o".into()));
        assert_eq!(data_from_item(&layout(), &item), None);
    }

    #[test]
    fn bad_data_is_refused_saying_what_to_change() {
        let key = LockKey::new("k");
        for (data, says) in [
            (&b"not json"[..], "not JSON"),
            (b"[1]", "not a JSON object"),
            (br#"{"fence":{"N":"1"}}"#, "fence attribute"),
            (br#"{"owner_name":{"S":"x"}}"#, "owner attribute"),
            (br#"{"":{"S":"x"}}"#, "empty"),
            (br#"{"a":"x"}"#, "type tag"),
            (br#"{"a":{"S":"x","N":"1"}}"#, "type tag"),
            (br#"{"a":{"N":"ten"}}"#, "not a number"),
            (br#"{"a":{"B":"***"}}"#, "base64"),
            (br#"{"a":{"SS":[]}}"#, "empty"),
            (br#"{"a":{"SS":["x","x"]}}"#, "twice"),
            (br#"{"a":{"Q":"x"}}"#, "unknown type tag"),
            (br#"{"a":{"L":[{"N":"x"}]}}"#, "not a number"),
        ] {
            let err = attributes_from_data(&layout(), &key, data).unwrap_err();
            assert_eq!(err.kind(), lock_core::StoreErrorKind::Invalid);
            assert!(err.to_string().contains(says), "{err} (wanted {says:?})");
        }
    }
}
