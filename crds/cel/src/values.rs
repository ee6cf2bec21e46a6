//! The CEL values a selector sees: `device` and what it leads to, borrowed from the caller's
//! [`DeviceView`] rather than copied, plus the Kubernetes `Quantity` and `Semver` types.

use crate::quantity::Quantity;
use crate::semver::Semver;
use crate::{AttributeValue, DeviceView};
use cel::common::traits::{Container, Indexer, Iterable, Iterator as CelIterator, Sizer};
use cel::common::types::{CelBool, CelInt, CelString, Type, MAP_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::ExecutionError;
use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;
use std::sync::OnceLock;

/// The CEL type of quantities, named as in Kubernetes.
pub(crate) static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");
/// The CEL type of semantic versions, named as in Kubernetes.
pub(crate) static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");
static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// A CEL value wrapping a Kubernetes scalar (its type, equality by the wrapped value).
macro_rules! scalar_val {
    ($name:ident, $ty:ident) => {
        impl Val for $name {
            fn get_type(&self) -> &Type {
                &$ty
            }

            fn cel_type() -> &'static Type {
                &$ty
            }

            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$name>().is_some_and(|o| o.0 == self.0)
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }

        impl StaticVal for $name {}
    };
}

/// A [`Quantity`] as a CEL value. Equality is numeric; there is no `<`, as in Kubernetes, where
/// quantities compare with `compareTo`, `isLessThan` and `isGreaterThan`.
#[derive(Clone, Debug)]
pub(crate) struct QuantityVal(pub(crate) Quantity);

scalar_val!(QuantityVal, QUANTITY_TYPE);

/// A [`Semver`] as a CEL value; equality ignores build metadata.
#[derive(Clone, Debug)]
pub(crate) struct SemverVal(pub(crate) Semver);

scalar_val!(SemverVal, SEMVER_TYPE);

/// What a device map holds: attributes or capacities, turned into CEL values on access.
pub(crate) trait Entry: Debug + Send + Sync + 'static {
    fn to_val<'a>(&'a self) -> Result<Box<dyn Val + 'a>, ExecutionError>;
}

impl Entry for AttributeValue {
    fn to_val<'a>(&'a self) -> Result<Box<dyn Val + 'a>, ExecutionError> {
        Ok(match self {
            AttributeValue::Int(i) => Box::new(CelInt::from(*i)),
            AttributeValue::Bool(b) => Box::new(CelBool::from(*b)),
            AttributeValue::String(s) => Box::new(CelString::from(s.as_str())),
            AttributeValue::Version(v) => Box::new(SemverVal(Semver::parse(v).map_err(|e| {
                ExecutionError::function_error("device.attributes", format!("version {v:?}: {e}"))
            })?)),
        })
    }
}

impl Entry for Quantity {
    fn to_val<'a>(&'a self) -> Result<Box<dyn Val + 'a>, ExecutionError> {
        Ok(Box::new(QuantityVal(self.clone())))
    }
}

fn string_index(idx: &dyn Val) -> Result<&str, ExecutionError> {
    idx.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: idx.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

/// Iterates borrowed strings as CEL values.
struct Strings<'b, 'a>(std::slice::Iter<'b, CelString<'a>>);

impl<'b, 'a: 'w, 'w> CelIterator<'b, 'w> for Strings<'b, 'a> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'w)> {
        self.0.next().map(|s| s as &dyn Val)
    }
}

/// `device`: its driver and its two maps of domains.
#[derive(Clone, Debug)]
pub(crate) struct DeviceVal<'a> {
    driver: CelString<'a>,
    attributes: Domains<'a, AttributeValue>,
    capacity: Domains<'a, Quantity>,
}

impl<'a> DeviceVal<'a> {
    pub(crate) fn new(device: &DeviceView<'a>) -> Self {
        DeviceVal {
            driver: CelString::from(device.driver),
            attributes: Domains::new(device.attributes),
            capacity: Domains::new(device.capacity),
        }
    }
}

impl<'a> Val for DeviceVal<'a> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }

    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl<'a> Indexer for DeviceVal<'a> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match string_index(idx)? {
            "driver" => Ok(CowVal::Borrowed(&self.driver)),
            "attributes" => Ok(CowVal::Borrowed(&self.attributes)),
            "capacity" => Ok(CowVal::Borrowed(&self.capacity)),
            other => Err(ExecutionError::no_such_key(other)),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// A CEL map value: indexed, `in`, `size()` and iterated through its own trait impls.
macro_rules! map_val {
    ($name:ident) => {
        impl<'a, V: Entry> Val for $name<'a, V> {
            fn get_type(&self) -> &Type {
                &MAP_TYPE
            }

            fn cel_type() -> &'static Type {
                &MAP_TYPE
            }

            fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }

            fn as_container(&self) -> Option<&dyn Container> {
                Some(self)
            }

            fn as_sizer(&self) -> Option<&dyn Sizer> {
                Some(self)
            }

            fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
        }
    };
}

/// `device.attributes` or `device.capacity`: a map from domain to that domain's map, in which an
/// unknown domain is an empty map, as in Kubernetes.
#[derive(Debug)]
pub(crate) struct Domains<'a, V: Entry> {
    /// Entries keyed by fully qualified name, `domain/id`.
    map: &'a BTreeMap<String, V>,
    /// The distinct domains, sorted: computed on first iteration.
    domains: OnceLock<Vec<CelString<'a>>>,
}

impl<'a, V: Entry> Clone for Domains<'a, V> {
    fn clone(&self) -> Self {
        Domains {
            map: self.map,
            domains: self.domains.clone(),
        }
    }
}

impl<'a, V: Entry> Domains<'a, V> {
    fn new(map: &'a BTreeMap<String, V>) -> Self {
        Domains {
            map,
            domains: OnceLock::new(),
        }
    }

    fn domains(&self) -> &[CelString<'a>] {
        self.domains.get_or_init(|| {
            let mut out: Vec<CelString<'a>> = Vec::new();
            for key in self.map.keys() {
                if let Some((domain, _)) = key.split_once('/') {
                    if out.last().is_none_or(|last| last.inner() != domain) {
                        out.push(CelString::from(domain));
                    }
                }
            }
            out
        })
    }
}

map_val!(Domains);

impl<'a, V: Entry> Indexer for Domains<'a, V> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let domain = string_index(idx)?;
        Ok(CowVal::owned(DomainMap {
            map: self.map,
            prefix: format!("{domain}/"),
            ids: OnceLock::new(),
        }))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl<'a, V: Entry> Container for Domains<'a, V> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        let domain = string_index(value)?;
        Ok(self.domains().iter().any(|d| d.inner() == domain))
    }
}

impl<'a, V: Entry> Sizer for Domains<'a, V> {
    fn size(&self) -> CelInt {
        CelInt::from(self.domains().len() as i64)
    }
}

impl<'a, V: Entry> Iterable for Domains<'a, V> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn CelIterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        Box::new(Strings(self.domains().iter()))
    }
}

/// One domain's entries, `device.attributes["gpu.nvidia.com"]`, keyed by id. A missing id is a
/// `no such key` error, which `has()` turns into `false`.
#[derive(Debug)]
pub(crate) struct DomainMap<'a, V: Entry> {
    map: &'a BTreeMap<String, V>,
    /// `domain/`.
    prefix: String,
    /// The ids, sorted: computed on first use.
    ids: OnceLock<Vec<CelString<'a>>>,
}

impl<'a, V: Entry> Clone for DomainMap<'a, V> {
    fn clone(&self) -> Self {
        DomainMap {
            map: self.map,
            prefix: self.prefix.clone(),
            ids: self.ids.clone(),
        }
    }
}

impl<'a, V: Entry> DomainMap<'a, V> {
    fn lookup(&self, id: &str) -> Option<&'a V> {
        let mut key = String::with_capacity(self.prefix.len() + id.len());
        key.push_str(&self.prefix);
        key.push_str(id);
        self.map.get(&key)
    }

    fn ids(&self) -> &[CelString<'a>] {
        self.ids.get_or_init(|| {
            let map: &'a BTreeMap<String, V> = self.map;
            let from = (Bound::Included(self.prefix.as_str()), Bound::Unbounded);
            map.range::<str, _>(from)
                .map(|(key, _)| key.as_str())
                .take_while(|key| key.starts_with(self.prefix.as_str()))
                .map(|key| CelString::from(&key[self.prefix.len()..]))
                .collect()
        })
    }
}

map_val!(DomainMap);

impl<'a, V: Entry> Indexer for DomainMap<'a, V> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let id = string_index(idx)?;
        match self.lookup(id) {
            Some(entry) => Ok(CowVal::Owned(entry.to_val()?)),
            None => Err(ExecutionError::no_such_key(id)),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl<'a, V: Entry> Container for DomainMap<'a, V> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.lookup(string_index(value)?).is_some())
    }
}

impl<'a, V: Entry> Sizer for DomainMap<'a, V> {
    fn size(&self) -> CelInt {
        CelInt::from(self.ids().len() as i64)
    }
}

impl<'a, V: Entry> Iterable for DomainMap<'a, V> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn CelIterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        Box::new(Strings(self.ids().iter()))
    }
}
