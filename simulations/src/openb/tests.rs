use super::*;

fn nodes(text: &str) -> Result<Vec<Node>, OpenbError> {
    read_nodes("n.csv", text.as_bytes())
}

fn pods(text: &str) -> Result<Vec<Pod>, OpenbError> {
    read_pods("p.csv", text.as_bytes())
}

fn pod_err(rows: &str) -> String {
    pods(&format!("{}\n{rows}", POD_COLUMNS.join(",")))
        .unwrap_err()
        .to_string()
}

#[test]
fn reads_nodes_and_pods_by_header_name() {
    let n =
        nodes("model,sn,gpu,cpu_milli,memory_mib\nT4,a,2,96000,1024\n,b,0,32000,2048\n").unwrap();
    assert_eq!(n[0].name, "a");
    assert_eq!(n[0].gpus, 2);
    assert_eq!(n[0].model, "T4");
    assert_eq!(n[1].model, "");
    let p = pods(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,scheduled_time,deletion_time\n\
         p0,1000,10,1,500,V100M16|V100M32,LS,5,7,9\np1,2000,10,2,1000,,BE,,,\n",
    )
    .unwrap();
    assert_eq!(p[0].gpu_spec, vec!["V100M16", "V100M32"]);
    assert_eq!(p[0].gpu_request(), 500);
    assert_eq!(
        (p[0].creation_time, p[0].scheduled_time, p[0].deletion_time),
        (Some(5), Some(7), Some(9))
    );
    assert!(p[1].gpu_spec.is_empty());
    assert_eq!(p[1].gpu_request(), 2000);
    assert_eq!(p[1].deletion_time, None);
}

#[test]
fn optional_columns_may_be_absent() {
    let p = pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n").unwrap();
    assert!(p[0].gpu_spec.is_empty());
    let n = nodes("sn,cpu_milli,memory_mib,gpu\na,1,1,0\n").unwrap();
    assert_eq!(n[0].model, "");
}

/// Every refused cell is named by file, line and column.
#[test]
fn malformed_rows_name_line_and_column() {
    let ok = "p0,1,1,1,1000,,LS,Running,0,10,0\n";
    for (row, wanted) in [
        (
            "q,x,1,1,1000,,LS,Running,0,10,0",
            "p.csv: line 3: cpu_milli: \"x\" is not a whole number",
        ),
        (
            "q,1,-1,1,1000,,LS,Running,0,10,0",
            "p.csv: line 3: memory_mib: -1 MiB is negative",
        ),
        (
            "q,1,1,65,1000,,LS,Running,0,10,0",
            "p.csv: line 3: num_gpu: 65 GPUs overflows",
        ),
        (
            "q,1,1,1,1500,,LS,Running,0,10,0",
            "p.csv: line 3: gpu_milli: 1500 milli-GPU overflows",
        ),
        (
            "q,1,1,0,500,,LS,Running,0,10,0",
            "p.csv: line 3: gpu_milli: 500 for a pod with num_gpu 0",
        ),
        (
            "q,1,1,2,500,,LS,Running,0,10,0",
            "p.csv: line 3: gpu_milli: 500 with num_gpu 2",
        ),
        (
            "q,1,1,1,0,,LS,Running,0,10,0",
            "p.csv: line 3: gpu_milli: 0 for a pod with num_gpu 1",
        ),
        (
            "q,1,1,1,1000,,LS,Running,0,10,20",
            "p.csv: line 3: deletion_time: 10 is before scheduled_time 20",
        ),
        (
            ",1,1,1,1000,,LS,Running,0,10,0",
            "p.csv: line 3: name: empty name",
        ),
        (
            "q,1,1,1,1000,,LS,Running,0,10,1000000000001",
            "p.csv: line 3: scheduled_time: 1000000000001 s overflows",
        ),
        (
            "q,1,1,1,1000,,LS",
            "p.csv: line 3: expected 11 fields, found 7",
        ),
    ] {
        let e = pod_err(&format!("{ok}{row}\n"));
        assert!(e.contains(wanted), "{row}: {e}");
    }
    let e = nodes("sn,cpu_milli,memory_mib,gpu,model\na,1,1,2\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("n.csv: line 2: expected 5 fields"), "{e}");
    let e = nodes("sn,cpu_milli,memory_mib,gpu,model\na,1,1099511627777,2,T4\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("n.csv: line 2: memory_mib: 1099511627777 MiB overflows"),
        "{e}"
    );
}

#[test]
fn headers_are_checked() {
    let e = pods("name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("p.csv") && e.contains("missing column \"num_gpu\""),
        "{e}"
    );
    let e = pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spce\np,1,1,1,1000,T4\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown column \"gpu_spce\""), "{e}");
    let e = nodes("sn,cpu_milli,memory_mib,gpu,model\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("n.csv") && e.contains("no rows"), "{e}");
    let e = nodes("").unwrap_err().to_string();
    assert!(e.contains("n.csv: no rows"), "{e}");
}
