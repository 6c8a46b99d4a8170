//! The CNI client's tests: the protocol against scripted plugins (what each gets in its
//! environment and on stdin, chaining, errors, the deadline), and a network of Debian's
//! real plugins (bridge, host-local, loopback) on a namespace of the test's own.

use super::*;
use base::testutil::TempDir;
use std::path::Path;
use std::process::Command;

/// A plugin that records its environment and stdin under `log`, then prints `reply`
/// (and exits with `code`).
fn script_plugin(dir: &Path, name: &str, log: &Path, reply: &str, code: i32) {
    let path = dir.join(name);
    let text = format!(
        "#!/bin/sh\n\
         {{ echo \"$CNI_COMMAND $CNI_CONTAINERID $CNI_NETNS $CNI_IFNAME $CNI_ARGS\"; cat; echo; }} >> {log}\n\
         printf '%s' '{reply}'\n\
         exit {code}\n",
        log = log.display()
    );
    write_executable(&path, &text);
}

/// Writes an executable file from a child process, so that no descriptor open for
/// writing on it is ever in this process: a test thread's fork (which keeps the
/// parent's descriptors until its exec) could otherwise hold one while the plugin is
/// run, and an exec of a file open for writing fails with ETXTBSY.
fn write_executable(path: &Path, text: &str) {
    use std::io::Write;
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$0\" && chmod 755 \"$0\""])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("sh");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).expect("write the plugin");
    }
    let status = child.wait().expect("wait for sh");
    assert!(status.success(), "cannot write {}", path.display());
}

fn list(json: &str) -> NetworkConfigList {
    conf::parse(Path::new("/t/10-net.conflist"), json.as_bytes()).expect("valid")
}

fn runtime_conf() -> RuntimeConf {
    RuntimeConf {
        container_id: "c1".into(),
        netns: "/proc/1/ns/net".into(),
        ifname: "eth0".into(),
        args: vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAME".into(), "web".into()),
        ],
        capability_args: serde_json::from_str(
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#,
        )
        .expect("json"),
    }
}

#[test]
fn add_chains_results_and_del_runs_backwards_with_the_cached_result() {
    let dir = TempDir::new("cni-chain");
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log = dir.0.join("log");
    script_plugin(
        &bin,
        "first",
        &log,
        r#"{"cniVersion":"1.0.0","ips":[{"address":"fd00::5/64"},{"address":"10.1.2.3/24"}]}"#,
        0,
    );
    script_plugin(
        &bin,
        "second",
        &log,
        r#"{"cniVersion":"1.0.0","ips":[{"address":"fd00::5/64"},{"address":"10.1.2.3/24"}],"note":"second"}"#,
        0,
    );
    let cni = Cni {
        bin_dirs: vec![dir.0.join("missing"), bin.clone()],
        cache_dir: dir.0.join("cache"),
        timeout: Duration::from_secs(20),
    };
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"testnet","plugins":[{"type":"first","x":1},
           {"type":"second","capabilities":{"portMappings":true,"bandwidth":true}}]}"#,
    );
    let rt = runtime_conf();
    let result = cni.add(&net, &rt).expect("add");
    assert_eq!(result["note"], "second", "the last plugin's result");
    assert_eq!(result_ips(&result), ["10.1.2.3", "fd00::5"], "IPv4 first");
    let cached = cache::read(&cni.cache_dir, "testnet", "c1", "eth0").expect("cached");
    assert_eq!(cached.result, result);
    assert_eq!(cached.network().expect("its config").plugins.len(), 2);
    assert_eq!(cache::all(&cni.cache_dir).len(), 1);

    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "ADD c1 /proc/1/ns/net eth0 IgnoreUnknown=1;K8S_POD_NAME=web"
    );
    let first: Value = serde_json::from_str(lines[1]).expect("first's stdin");
    assert_eq!(
        (&first["name"], &first["cniVersion"], &first["x"]),
        (
            &Value::from("testnet"),
            &Value::from("1.0.0"),
            &Value::from(1)
        )
    );
    assert!(first.get("prevResult").is_none() && first.get("runtimeConfig").is_none());
    let second: Value = serde_json::from_str(lines[3]).expect("second's stdin");
    assert_eq!(second["prevResult"]["ips"][1]["address"], "10.1.2.3/24");
    assert_eq!(
        second["runtimeConfig"]["portMappings"][0]["hostPort"], 8080,
        "a declared capability that the runtime has"
    );
    assert!(second["runtimeConfig"].get("bandwidth").is_none());

    std::fs::remove_file(&log).expect("rm");
    cni.del(&net, &rt).expect("del");
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("DEL c1 "), "{text}");
    let second_del: Value = serde_json::from_str(lines[1]).expect("stdin");
    assert_eq!(second_del["type"], "second", "reverse order");
    assert_eq!(
        second_del["prevResult"]["note"], "second",
        "the cached result"
    );
    let first_del: Value = serde_json::from_str(lines[3]).expect("stdin");
    assert_eq!(first_del["type"], "first");
    assert!(cache::read(&cni.cache_dir, "testnet", "c1", "eth0").is_none());
}

#[test]
fn a_failing_a_missing_and_a_hung_plugin_are_errors_that_say_so() {
    let dir = TempDir::new("cni-fail");
    let log = dir.0.join("log");
    script_plugin(
        &dir.0,
        "fails",
        &log,
        r#"{"cniVersion":"1.0.0","code":11,"msg":"no addresses left","details":"range 10.1.2.0/24 is full"}"#,
        1,
    );
    let hung = dir.0.join("hangs");
    write_executable(&hung, "#!/bin/sh\nsleep 1000\n");
    let cni = Cni {
        bin_dirs: vec![dir.0.clone()],
        cache_dir: dir.0.join("cache"),
        timeout: Duration::from_millis(500),
    };
    let net = |t: &str| list(&format!(r#"{{"name":"n","plugins":[{{"type":"{t}"}}]}}"#));
    let e = cni.add(&net("fails"), &runtime_conf()).expect_err("fails");
    assert_eq!(
        e.to_string(),
        "plugin type=\"fails\" failed (ADD): no addresses left; range 10.1.2.0/24 is full"
    );
    let e = cni
        .add(&net("absent"), &runtime_conf())
        .expect_err("absent");
    assert!(
        e.to_string()
            .starts_with("failed to find plugin \"absent\" in path"),
        "{e}"
    );
    let t = std::time::Instant::now();
    let e = cni.add(&net("hangs"), &runtime_conf()).expect_err("hangs");
    assert!(e.to_string().contains("did not finish within"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(cache::all(&cni.cache_dir).is_empty(), "nothing cached");
}

#[test]
fn a_plugin_being_written_is_run_once_its_writer_is_done_as_libcni_does() {
    let dir = TempDir::new("cni-busy");
    let log = dir.0.join("log");
    script_plugin(&dir.0, "busy", &log, r#"{"cniVersion":"1.0.0"}"#, 0);
    // An install writing the plugin in place: its binary open for writing, which
    // makes an exec of it fail with ETXTBSY until the writer closes it.
    let open_for_writing = || {
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.0.join("busy"))
            .expect("open the plugin for writing")
    };
    let writer = open_for_writing();
    let closer = base::testutil::spawn_named("cni-busy-writer", move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(writer);
    });
    let cni = Cni {
        bin_dirs: vec![dir.0.clone()],
        cache_dir: dir.0.join("cache"),
        timeout: Duration::from_secs(20),
    };
    let net = list(r#"{"name":"n","plugins":[{"type":"busy"}]}"#);
    cni.add(&net, &runtime_conf()).expect("run once written");
    closer.join().expect("the writer");
    let text = std::fs::read_to_string(&log).expect("log");
    assert_eq!(
        text.lines().next(),
        Some("ADD c1 /proc/1/ns/net eth0 IgnoreUnknown=1;K8S_POD_NAME=web")
    );

    // A writer that does not finish: the tries stop within the deadline, and the
    // error names the plugin and why.
    let _held = open_for_writing();
    let short = Cni {
        timeout: Duration::from_millis(2500),
        ..cni
    };
    let t = std::time::Instant::now();
    let e = short
        .add(&net, &runtime_conf())
        .expect_err("still being written");
    // Five tries a second apart would take 5 s: the 2.5 s deadline stops them (after
    // the third, which leaves less than the second a fourth would wait).
    assert!(
        t.elapsed() < Duration::from_millis(4500),
        "{:?}",
        t.elapsed()
    );
    let said = e.to_string();
    assert!(
        said.starts_with("plugin type=\"busy\" failed (ADD): cannot run it: ")
            && said.contains("Text file busy"),
        "{said}"
    );
}

/// A network namespace of the test's own (`ip netns`), deleted on drop.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let ok = Command::new("ip")
            .args(["netns", "add", name])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip netns add {name} (needs root and iproute2)");
        Netns(name.to_string())
    }

    fn path(&self) -> String {
        format!("/var/run/netns/{}", self.0)
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .expect("ip netns exec");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn debians_plugins_give_a_namespace_an_address_and_take_it_back() {
    let plugins = PathBuf::from("/usr/lib/cni");
    assert!(
        plugins.join("bridge").is_file(),
        "/usr/lib/cni/bridge is missing: install the CNI plugins for the tests with \
         `apt-get install -y containernetworking-plugins` (.ci/run does)"
    );
    let dir = TempDir::new("cni-real");
    let bridge = format!("rkt{}", std::process::id() % 100_000);
    let ipam_dir = dir.0.join("ipam");
    let net = conf::parse(
        Path::new("/t/10-test.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"rkt-test","plugins":[
                {{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                  "ipam":{{"type":"host-local","dataDir":"{ipam}",
                           "ranges":[[{{"subnet":"10.251.7.0/24"}}]]}}}},
                {{"type":"loopback"}}]}}"#,
            ipam = ipam_dir.display()
        )
        .as_bytes(),
    )
    .expect("valid");
    let cni = Cni {
        bin_dirs: vec![plugins],
        cache_dir: dir.0.join("cache"),
        timeout: Duration::from_secs(30),
    };
    let ns = Netns::new(&format!("rkt-cni-{}", std::process::id()));
    let rt = RuntimeConf {
        container_id: "sandbox1".into(),
        netns: ns.path(),
        ifname: "eth0".into(),
        args: vec![("IgnoreUnknown".into(), "1".into())],
        capability_args: Map::new(),
    };
    let result = cni.add(&net, &rt).expect("add");
    let ips = result_ips(&result);
    assert_eq!(ips.len(), 1, "{result}");
    assert!(ips[0].starts_with("10.251.7."), "{ips:?}");
    let addrs = ns.run(&["ip", "-4", "-o", "addr", "show", "eth0"]);
    assert!(addrs.contains(&format!("{}/24", ips[0])), "{addrs}");
    let allocated = ipam_dir.join("rkt-test").join(&ips[0]);
    assert!(allocated.exists(), "host-local's allocation file");

    cni.del(&net, &rt).expect("del");
    assert!(!allocated.exists(), "the address is free again");
    assert!(
        ns.run(&["ip", "-o", "link", "show", "eth0"]).is_empty(),
        "veth gone"
    );
    assert!(cache::all(&cni.cache_dir).is_empty());
    // A second DEL of what is gone is no error (the spec's DEL is idempotent).
    cni.del(&net, &rt).expect("del again");
    let _ = Command::new("ip").args(["link", "del", &bridge]).status();
}
