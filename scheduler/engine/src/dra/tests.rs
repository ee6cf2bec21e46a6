//! The device search on hand-worked cases.

use super::*;

/// One node reaching `n` devices, device `k` with attribute `x/v` = `values[k]`.
fn table(values: &[i64], sets: Vec<Vec<u32>>) -> DraTable {
    let devices = (values.iter().enumerate())
        .map(|(k, v)| DraDevice {
            driver: Arc::from("d"),
            pool: Arc::from("p"),
            name: Arc::from(format!("dev-{k}").as_str()),
            reach: Reach::Node("n".into()),
            attributes: [("x/v".to_string(), AttrValue::Int(*v))].into(),
            consumes: Vec::new(),
        })
        .collect();
    let spec = DraSpec {
        devices,
        eligible: sets.into_iter().map(|s| s.into_iter().collect()).collect(),
        allocated: DeviceSet::default(),
        counters: Vec::new(),
    };
    DraTable::new(spec, &["n"])
}

fn alt(name: &str, eligible: u32, count: Count) -> Alternative {
    Alternative {
        name: name.into(),
        eligible,
        count,
        admin_access: false,
    }
}

fn one(requests: Vec<RequestAsk>, constraints: Vec<ConstraintAsk>) -> ClaimNeed {
    ClaimNeed {
        claims: vec![ClaimAsk {
            label: "c".into(),
            shared: None,
            state: ClaimState::Pending {
                requests,
                constraints,
            },
        }],
    }
}

fn devices(t: &DraTable, need: &ClaimNeed) -> Result<Vec<(String, u32)>, ClaimRefusal> {
    let picks = search(t, need, 0, (&|_| true, &[]), &|_| None)?;
    let pick = picks.into_iter().next().flatten().unwrap();
    Ok(pick.results.into_iter().map(|(r, d, _)| (r, d)).collect())
}

#[test]
fn a_request_backs_off_a_device_a_later_one_needs() {
    // `a` may take 0 or 1, `b` only 0: the first solution gives `a` device 1.
    let t = table(&[0, 0], vec![vec![0, 1], vec![0]]);
    let need = one(
        vec![
            RequestAsk {
                name: "a".into(),
                alternatives: vec![alt("a", 0, Count::Exactly(1))],
            },
            RequestAsk {
                name: "b".into(),
                alternatives: vec![alt("b", 1, Count::Exactly(1))],
            },
        ],
        vec![],
    );
    assert_eq!(
        devices(&t, &need).unwrap(),
        [("a".to_string(), 1), ("b".to_string(), 0)]
    );
}

#[test]
fn alternatives_are_tried_in_order_and_constraints_can_name_one() {
    // `big` (2 devices with one value) is impossible: values 0, 1, 2; `small` takes one.
    let t = table(&[0, 1, 2], vec![vec![0, 1, 2]]);
    let request = RequestAsk {
        name: "r".into(),
        alternatives: vec![
            alt("r/big", 0, Count::Exactly(2)),
            alt("r/small", 0, Count::Exactly(1)),
        ],
    };
    let same = |requests: Vec<String>| ConstraintAsk {
        requests,
        attribute: "x/v".into(),
        distinct: false,
    };
    let need = one(vec![request.clone()], vec![same(vec!["r/big".into()])]);
    assert_eq!(devices(&t, &need).unwrap(), [("r/small".to_string(), 0)]);
    // A constraint on `r` covers its alternatives too.
    let need = one(vec![request.clone()], vec![same(vec!["r".into()])]);
    assert_eq!(devices(&t, &need).unwrap(), [("r/small".to_string(), 0)]);
    // Without the constraint the first alternative wins.
    let need = one(vec![request], vec![]);
    assert_eq!(
        devices(&t, &need).unwrap(),
        [("r/big".to_string(), 0), ("r/big".to_string(), 1)]
    );
}

#[test]
fn all_takes_every_matching_device_only_when_none_is_in_use() {
    let t = table(&[0, 0, 0], vec![vec![0, 2]]);
    let need = one(
        vec![RequestAsk {
            name: "r".into(),
            alternatives: vec![alt("r", 0, Count::All)],
        }],
        vec![],
    );
    assert_eq!(
        devices(&t, &need).unwrap(),
        [("r".to_string(), 0), ("r".to_string(), 2)]
    );
    let busy = search(&t, &need, 0, (&|d| d != 2, &[]), &|_| None);
    let short = ClaimRefusal {
        claim: 0,
        why: ClaimShort::TooFewFreeDevices,
    };
    assert_eq!(busy, Err(short));
    assert_eq!(
        short.describe(&need),
        "cannot allocate claim c: too few free devices"
    );
    // No matching device at all: nothing to take, no fit.
    let none = table(&[0], vec![vec![]]);
    assert!(search(&none, &need, 0, (&|_| true, &[]), &|_| None).is_err());
    let unmatched = ClaimRefusal {
        claim: 0,
        why: ClaimShort::NoDeviceMatches { request: 0 },
    };
    assert_eq!(none.could_fit(&need, 0, "n"), Err(unmatched));
    assert_eq!(
        unmatched.describe(&need),
        "cannot allocate claim c: no device matches selectors of request r"
    );
}

/// One GPU as partitionable MIG devices: 8 memory slices (counter 0), a `7g` on all of them
/// (device 0), two `3g` on slices 0–3 and 4–7 (devices 1, 2), and a `1g` on slice 0 (device 3).
fn mig_gpu() -> DraTable {
    let mut t = table(&[7, 3, 3, 1], vec![vec![0, 1, 2, 3], vec![1, 2]]);
    let slices = |n: i64| vec![(0, n * 1000)];
    for (d, consumes) in t
        .devices
        .iter_mut()
        .zip([slices(8), slices(4), slices(4), slices(1)])
    {
        d.consumes = consumes;
    }
    t.counters = vec![8000];
    t
}

fn ask(eligible: u32, n: u32) -> ClaimNeed {
    let r = RequestAsk {
        name: "r".into(),
        alternatives: vec![alt("r", eligible, Count::Exactly(n))],
    };
    one(vec![r], vec![])
}

#[test]
fn partitionable_devices_take_only_what_their_shared_counters_hold() {
    let t = mig_gpu();
    // Two 3g fit together (4 + 4 slices); nothing is left for a third device beside them.
    assert_eq!(
        devices(&t, &ask(1, 2)).unwrap(),
        [("r".to_string(), 1), ("r".to_string(), 2)]
    );
    // Two of any kind: the 7g would take all 8 slices, so the search backs off it.
    assert_eq!(
        devices(&t, &ask(0, 2)).unwrap(),
        [("r".to_string(), 1), ("r".to_string(), 2)]
    );
    assert!(devices(&t, &ask(0, 3)).is_err());
    // With the 1g in use (1 slice held), a 7g no longer fits, a 3g still does.
    let held = t.counters_held([3]);
    assert_eq!(held, [1000]);
    let free = |d: u32| d != 3;
    let seven = one(
        vec![RequestAsk {
            name: "r".into(),
            alternatives: vec![alt("r", 0, Count::Exactly(1))],
        }],
        vec![],
    );
    let picks = search(&t, &seven, 0, (&free, &held), &|_| None).unwrap();
    assert_eq!(
        picks[0].as_ref().unwrap().results[0].1,
        1,
        "a 3g, not the 7g"
    );
    let refused = search(&t, &ask(1, 2), 0, (&free, &held), &|_| None);
    assert_eq!(refused.unwrap_err().why, ClaimShort::TooFewFreeDevices);
    // Admin access takes devices in use and holds no counters.
    let mut admin = alt("r", 0, Count::Exactly(1));
    admin.admin_access = true;
    let need = one(
        vec![RequestAsk {
            name: "r".into(),
            alternatives: vec![admin],
        }],
        vec![],
    );
    let full = t.counters_held([0]);
    assert!(search(&t, &need, 0, (&|_| true, &full), &|_| None).is_ok());
}
