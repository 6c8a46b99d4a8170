//! `/metrics` on the read-only port and on the authenticated kubelet port, scraped
//! with curl (a client certificate on the kubelet port) from a real rkubelet running
//! one pod on the real Docker engine, checked by `promtool check metrics`, and read
//! for the figures that must be there with plausible values. Also `/metrics/probes`
//! and `/runningpods/` on the kubelet port.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use crate::apiserver::Pki;
use crate::util::{free_port, pod_yaml, wait_for, Node, BUSYBOX, LONG, SLEEPER};

/// A GET with curl: (status, content type, body). `tls` is the kubelet port with the
/// test CA's client certificate; otherwise plain HTTP.
fn curl(port: u16, path: &str, tls: Option<&Pki>) -> (u16, String, String) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code} %{content_type}",
    ]);
    let url = match tls {
        Some(pki) => {
            c.arg("--cacert").arg(&pki.ca);
            c.arg("--cert").arg(&pki.client_cert);
            c.arg("--key").arg(&pki.client_key);
            format!("https://127.0.0.1:{port}{path}")
        }
        None => format!("http://127.0.0.1:{port}{path}"),
    };
    let out = c.arg(url).stdin(Stdio::null()).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", "0 "));
    let (code, ctype) = tail.split_once(' ').unwrap_or((tail, ""));
    (
        code.trim().parse().unwrap_or(0),
        ctype.trim().to_string(),
        body.to_string(),
    )
}

/// The samples of a scrape: `name{labels}` exactly as printed → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            let v = match v {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            Some((k.to_string(), v))
        })
        .collect()
}

/// One sample's value; fails with the scrape when it is missing.
fn value(s: &BTreeMap<String, f64>, key: &str) -> f64 {
    match s.get(key) {
        Some(v) => *v,
        None => panic!(
            "{key} missing; samples:\n{}",
            s.keys().cloned().collect::<Vec<_>>().join("\n")
        ),
    }
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn pki_flags(pki: &Pki, port: u16) -> Vec<String> {
    vec![
        format!("--port={port}"),
        format!("--tls-cert-file={}", pki.server_cert.display()),
        format!("--tls-private-key-file={}", pki.server_key.display()),
        format!("--client-ca-file={}", pki.ca.display()),
        "--anonymous-auth=false".into(),
    ]
}

#[test]
fn metrics_on_both_ports_pass_promtool_and_tell_the_truth_about_one_pod() {
    let pki = Pki::get();
    let mut node = Node::new("metrics");
    // Docker through a proxy that can cut the event stream: the relist below.
    let proxy = crate::pleg::DockerProxy::start(&node.dir);
    node.endpoint = proxy.endpoint();
    node.write_manifest("web.yaml", &pod_yaml("web", 2, &[("app", SLEEPER)]));
    let port = free_port();
    let flags = pki_flags(&pki, port);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    wait_for("the kubelet port to listen", LONG, || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let ro = node.ro_port;

    // The pod runs and a relist has seen it.
    let first = wait_for("kubelet_running_pods 1 on the read-only port", LONG, || {
        let (code, _, body) = curl(ro, "/metrics", None);
        let s = samples(&body);
        (code == 200
            && s.get("kubelet_running_pods") == Some(&1.0)
            && s.get("kubelet_running_containers{container_state=\"running\"}") == Some(&1.0))
        .then_some(body)
    });

    // Read-only port: the format, then the figures.
    let (code, ctype, body) = curl(ro, "/metrics", None);
    assert_eq!(code, 200);
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    crate::util::promtool(&body, "the read-only port's /metrics");
    let s = samples(&body);
    assert_eq!(
        value(&s, &format!("kubelet_node_name{{node=\"{}\"}}", node.name)),
        1.0
    );
    assert_eq!(value(&s, "kubelet_desired_pods{static=\"true\"}"), 1.0);
    assert_eq!(value(&s, "kubelet_desired_pods{static=\"false\"}"), 0.0);
    assert!(value(&s, "kubelet_started_pods_total") >= 1.0);
    assert!(
        value(
            &s,
            "kubelet_started_containers_total{container_type=\"container\"}"
        ) >= 1.0
    );
    assert!(
        !s.contains_key("kubelet_restarted_pods_total{static=\"true\"}"),
        "no pod was restarted"
    );
    let started = value(&s, "kubelet_pod_start_duration_seconds_count");
    assert_eq!(started, 1.0, "one pod started");
    let took = value(&s, "kubelet_pod_start_duration_seconds_sum");
    assert!(
        took > 0.0 && took < LONG.as_secs_f64(),
        "pod start took {took} s"
    );
    assert!(
        value(
            &s,
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}"
        ) >= 1.0
    );
    assert!(
        value(
            &s,
            "kubelet_runtime_operations_total{operation_type=\"list_containers\"}"
        ) >= 1.0
    );
    // CRI's operations: the sandbox is run (created and started) by one call.
    assert!(
        value(
            &s,
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"}"
        ) >= 1.0
    );
    assert!(
        value(
            &s,
            "kubelet_runtime_operations_total{operation_type=\"create_container\"}"
        ) >= 1.0
    );
    assert!(
        value(
            &s,
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"start_container\"}"
        ) >= 1.0,
        "the app container started"
    );
    let last_seen = value(&s, "kubelet_pleg_last_seen_seconds");
    assert!(
        (now_unix() - last_seen).abs() < 30.0,
        "PLEG last seen {last_seen}"
    );
    let rss = value(&s, "process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 1e9, "RSS {rss}");
    assert!(value(&s, "process_virtual_memory_bytes") >= rss);
    let start = value(&s, "process_start_time_seconds");
    assert!(
        now_unix() - start < 600.0 && start <= now_unix() + 1.0,
        "start time {start}"
    );
    let fds = value(&s, "process_open_fds");
    assert!(
        fds > 3.0 && fds <= value(&s, "process_max_fds"),
        "fds {fds}"
    );
    assert!(value(&s, "process_cpu_seconds_total") >= 0.0);
    assert!(value(&s, "rkubelet_loop_ticks_total{loop=\"pleg\"}") >= 1.0);
    assert!(value(&s, "rkubelet_loop_ticks_total{loop=\"sync-loop\"}") >= 1.0);
    assert!(value(&s, "rkubelet_loop_last_tick_age_seconds{loop=\"pleg\"}") < 30.0);
    // Every scrape so far was counted, this one included (counted on arrival).
    let scrapes = value(
        &s,
        "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readonly\"}",
    );
    assert!(scrapes >= 2.0, "{scrapes} scrapes counted");
    assert_eq!(
        value(
            &s,
            "kubelet_http_inflight_requests{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readonly\"}"
        ),
        1.0,
        "this scrape is in flight while it renders"
    );

    // The PLEG histogram grows between scrapes. With the event stream open the full
    // relist runs every 5 minutes; a broken stream brings one at once (and 1 s relists
    // until it is back).
    let relists = |body: &str| value(&samples(body), "kubelet_pleg_relist_duration_seconds_count");
    let before = relists(&first);
    proxy.cut_events();
    wait_for("more relists", LONG, || {
        let (_, _, b) = curl(ro, "/metrics", None);
        (relists(&b) > before).then_some(())
    });

    // Kubelet port: the same registry, over TLS with a client certificate; a refused
    // request is counted too.
    let (code, _, _) = curl_no_cert(port, "/pods");
    assert_eq!(code, 401);
    let (code, ctype, body) = curl(port, "/metrics", Some(&pki));
    assert_eq!(code, 200, "{body}");
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    crate::util::promtool(&body, "the kubelet port's /metrics");
    let s = samples(&body);
    assert_eq!(value(&s, "kubelet_running_pods"), 1.0);
    assert!(
        value(
            &s,
            "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readwrite\"}"
        ) >= 1.0
    );
    assert!(
        value(
            &s,
            "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readwrite\"}"
        ) >= 1.0,
        "the 401 was counted"
    );
    assert!(
        value(
            &s,
            "kubelet_http_requests_duration_seconds_count{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readonly\"}"
        ) >= 2.0
    );

    // /metrics/probes stays as it was, and is on the kubelet port too.
    let (code, ctype, probes) = curl(port, "/metrics/probes", Some(&pki));
    assert_eq!(
        (code, ctype.as_str()),
        (200, "text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        probes.contains("# TYPE rkubelet_prober_lateness_seconds summary"),
        "{probes}"
    );
    crate::util::promtool(&probes, "/metrics/probes");

    // /runningpods/: the runtime's pod, as the last relist saw it.
    let (code, _, running) = curl(port, "/runningpods/", Some(&pki));
    assert_eq!(code, 200, "{running}");
    let v: serde_json::Value = serde_json::from_str(&running).expect("JSON");
    assert_eq!(v["kind"], "PodList");
    let items = v["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{running}");
    assert_eq!(items[0]["metadata"]["name"], format!("web-{}", node.name));
    assert_eq!(items[0]["metadata"]["namespace"], "default");
    assert_eq!(
        items[0]["spec"]["containers"],
        serde_json::json!([{"name": "app", "image": BUSYBOX, "resources": {}}])
    );
    let (code, _, _) = curl_post(port, "/runningpods/", &pki);
    assert_eq!(code, 405);
}

/// A request to the kubelet port without a client certificate.
fn curl_no_cert(port: u16, path: &str) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, String::new(), String::new())
}

/// A POST to the kubelet port with the client certificate.
fn curl_post(port: u16, path: &str, pki: &Pki) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
        ])
        .arg("--cacert")
        .arg(&pki.ca)
        .arg("--cert")
        .arg(&pki.client_cert)
        .arg("--key")
        .arg(&pki.client_key)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, String::new(), String::new())
}
