//! Image pulls end to end: a real rkubelet, the real Docker engine and a real local
//! registry with basic auth. Credentials come from a Docker config file in the root
//! directory; pull policies, pull errors and the pull backoff show in `/pods`.

use crate::registry::{
    base64, container_status, wait_running_id, wait_waiting, Registry, PASSWORD, USER,
};
use crate::util::{unique, wait_for, Node, BUSYBOX, LONG, SLEEPER};

/// A pod running `SLEEPER` in one container per (name, image, pull policy).
fn pod(name: &str, containers: &[(&str, &str, Option<&str>)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n"
    );
    for (c, image, policy) in containers {
        y.push_str(&format!(
            "  - name: {c}\n    image: {image:?}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
        ));
        if let Some(p) = policy {
            y.push_str(&format!("    imagePullPolicy: {p}\n"));
        }
    }
    y
}

/// A node whose HOME is its own directory, so no credentials of the machine leak in.
fn node(prefix: &str) -> Node {
    let mut n = Node::new(prefix);
    n.env
        .push(("HOME".into(), n.dir.join("home").display().to_string()));
    std::fs::create_dir_all(n.dir.join("root")).expect("root dir");
    n
}

fn write_config(node: &Node, json: &str) {
    std::fs::write(node.dir.join("root").join("config.json"), json).expect("config.json");
}

#[test]
fn pull_with_credentials_from_the_root_dir_config_runs_the_pod_and_pulls_once() {
    let reg = Registry::start();
    let image = reg.push(BUSYBOX, &format!("rk/{}", unique("cred")), "v1", true);
    let mut node = node("img-cred");
    let auth = base64(format!("{USER}:{PASSWORD}").as_bytes(), false);
    write_config(
        &node,
        &format!(
            "{{\"auths\": {{\"{}\": {{\"auth\": \"{auth}\"}}, \"other.example.com\": {{\"auth\": \"eDp5\"}}}}}}",
            reg.host
        ),
    );
    // Two pods need the same absent image at once: pulls are serialized, and the
    // second finds the image the first pulled.
    node.write_manifest("a.yaml", &pod("a", &[("c", &image, None)]));
    node.write_manifest("b.yaml", &pod("b", &[("c", &image, None)]));
    node.start(&[]);
    wait_running_id(&node, "a", "c");
    wait_running_id(&node, "b", "c");
    let log = node.log();
    assert!(
        log.contains(&format!("Successfully pulled image \"{image}\"")),
        "{log}"
    );
    let pulls = log.matches(&format!("Pulling image \"{image}\"")).count();
    assert_eq!(pulls, 1, "one pull for both pods: {log}");
}

#[test]
fn pull_without_or_with_wrong_credentials_is_err_image_pull_then_back_off() {
    let reg = Registry::start();
    let image = reg.push(BUSYBOX, &format!("rk/{}", unique("nocred")), "v1", true);

    let mut none = node("img-none");
    none.write_manifest("p.yaml", &pod("p", &[("c", &image, None)]));
    none.start(&[]);

    let mut wrong = node("img-wrong");
    write_config(
        &wrong,
        &format!(
            "{{\"auths\": {{\"{}\": {{\"username\": \"{USER}\", \"password\": \"nope\"}}}}}}",
            reg.host
        ),
    );
    wrong.write_manifest("p.yaml", &pod("p", &[("c", &image, None)]));
    wrong.start(&[]);

    for n in [&none, &wrong] {
        let msg = wait_waiting(n, "p", "c", "ErrImagePull");
        assert!(
            msg.starts_with(&format!("Failed to pull image \"{image}\"")),
            "{msg}"
        );
        let msg = wait_waiting(n, "p", "c", "ImagePullBackOff");
        assert!(
            msg.starts_with(&format!("Back-off pulling image \"{image}\"")),
            "{msg}"
        );
        let log = n.log();
        // Events are logged in the one recorder's layout (src/record.rs).
        assert!(
            log.contains(&format!(
                "event: Warning Failed pod/default/p-{}: Failed to pull image",
                n.name
            )),
            "{log}"
        );
        assert!(
            log.contains(&format!(
                "event: Normal BackOff pod/default/p-{}: Back-off pulling image",
                n.name
            )),
            "{log}"
        );
        assert!(
            n.containers_named("c").is_empty(),
            "no container without its image"
        );
    }
}

#[test]
fn pull_policies_never_if_not_present_always_and_invalid_names() {
    let reg = Registry::start();
    // Pushed and kept locally: present on the node, pullable only with credentials.
    let image = reg.push(BUSYBOX, &format!("rk/{}", unique("policy")), "v1", false);
    let absent = format!("rkubelet/absent-{}:1", unique("x"));
    let mut node = node("img-policy");
    node.write_manifest(
        "p.yaml",
        &pod(
            "p",
            &[
                ("ifnotpresent", &image, Some("IfNotPresent")),
                ("always", &image, Some("Always")),
                ("never-present", BUSYBOX, Some("Never")),
                ("never-absent", &absent, Some("Never")),
                ("invalid", "Bad Image::x", None),
            ],
        ),
    );
    node.start(&[]);

    wait_running_id(&node, "p", "ifnotpresent");
    wait_running_id(&node, "p", "never-present");
    let msg = wait_waiting(&node, "p", "never-absent", "ErrImageNeverPull");
    assert_eq!(
        msg,
        format!("Container image \"{absent}\" is not present with pull policy of Never")
    );
    let msg = wait_waiting(&node, "p", "invalid", "InvalidImageName");
    assert!(
        msg.contains("couldn't parse image reference \"Bad Image::x\": invalid reference format"),
        "{msg}"
    );
    // Always pulls although the image is present, and fails without credentials.
    let msg = wait_waiting(&node, "p", "always", "ErrImagePull");
    assert!(msg.contains("Failed to pull image"), "{msg}");
    let log = node.log();
    assert!(
        log.contains(&format!(
            "Container image \"{image}\" already present on machine"
        )),
        "{log}"
    );

    // Credentials (username/password form) are read at the next pull: once the
    // backoff expires the Always container runs.
    write_config(
        &node,
        &format!(
            "{{\"auths\": {{\"http://{}/v2/\": {{\"username\": \"{USER}\", \"password\": \"{PASSWORD}\"}}}}}}",
            reg.host
        ),
    );
    wait_running_id(&node, "p", "always");
    wait_for("always to show running in /pods", LONG, || {
        container_status(&node, "p", "always")
            .filter(|s| s["state"]["running"].is_object())
            .map(|_| ())
    });
    wait_for("the pull to be logged", LONG, || {
        node.log()
            .contains(&format!("Successfully pulled image \"{image}\""))
            .then_some(())
    });
}

/// A TCP proxy in front of the registry that holds every connection until released:
/// a pull through it hangs as on a slow link, then goes on.
struct HeldProxy {
    port: u16,
    release: std::sync::mpsc::Sender<()>,
}

impl HeldProxy {
    fn start(target: &str) -> HeldProxy {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let target = target.to_string();
        let (release, released) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            let mut open = false;
            listener.set_nonblocking(true).expect("nonblocking");
            loop {
                if !open {
                    match released.try_recv() {
                        Ok(()) => open = true,
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                        Err(std::sync::mpsc::TryRecvError::Empty) => {}
                    }
                }
                if open {
                    for c in held.drain(..) {
                        forward(c, &target);
                    }
                }
                match listener.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).expect("blocking");
                        held.push(c);
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        });
        HeldProxy { port, release }
    }
}

/// Copies both ways between `client` and a new connection to `target`.
fn forward(client: std::net::TcpStream, target: &str) {
    let Ok(server) = std::net::TcpStream::connect(target) else {
        return;
    };
    for (mut from, mut to) in [
        (
            client.try_clone().expect("clone"),
            server.try_clone().expect("clone"),
        ),
        (server, client),
    ] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    }
}

#[test]
fn a_held_pull_holds_no_pod_worker_and_its_pods_start_when_it_ends() {
    let reg = Registry::start();
    let repo = format!("rk/{}", unique("held"));
    reg.push(BUSYBOX, &repo, "v1", true);
    let proxy = HeldProxy::start(&reg.host);
    let image = format!("127.0.0.1:{}/{repo}:v1", proxy.port);
    let mut node = node("img-held");
    let auth = base64(format!("{USER}:{PASSWORD}").as_bytes(), false);
    write_config(
        &node,
        &format!(
            "{{\"auths\": {{\"127.0.0.1:{}\": {{\"auth\": \"{auth}\"}}}}}}",
            proxy.port
        ),
    );
    // More pods waiting for the held image than there are pod workers (4), and one
    // whose image is present.
    for i in 0..5 {
        node.write_manifest(
            &format!("a{i}.yaml"),
            &pod(&format!("a{i}"), &[("c", &image, None)]),
        );
    }
    node.write_manifest("b.yaml", &pod("b", &[("c", BUSYBOX, None)]));
    let began = std::time::Instant::now();
    node.start(&[]);
    wait_running_id(&node, "b", "c");
    let b_latency = began.elapsed();
    eprintln!("pod b running {b_latency:?} after start while the pull is held");
    let msg = wait_waiting(&node, "a0", "c", "ContainerCreating");
    assert_eq!(msg, format!("Pulling image \"{image}\""));
    assert!(node.containers_named("c").len() == 1, "only b runs");

    proxy.release.send(()).expect("release");
    for i in 0..5 {
        wait_running_id(&node, &format!("a{i}"), "c");
    }
    let log = node.log();
    let pulls = log.matches(&format!("Pulling image \"{image}\"")).count();
    assert_eq!(pulls, 1, "one pull for five pods: {log}");
}

/// `docker` with `args`, which must succeed.
fn docker_cli(args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    out
}

/// Removes the test's image tags whatever happens.
struct Tags(Vec<String>);

impl Drop for Tags {
    fn drop(&mut self) {
        for t in &self.0 {
            let _ = std::process::Command::new("docker")
                .args(["rmi", t])
                .output();
        }
    }
}

#[test]
fn archives_in_the_preload_directory_are_loaded_and_a_broken_one_is_named() {
    let mut n = node("preload");
    let dir = n.dir.join("images");
    std::fs::create_dir_all(&dir).expect("preload dir");
    let first = format!("rkubelet-preload/{}:1", unique("a"));
    let second = format!("rkubelet-preload/{}:2", unique("b"));
    let _tags = Tags(vec![first.clone(), second.clone()]);
    // A tag of the test's own on busybox, saved to an archive, then removed: only the
    // archive has it. The second one is gzip-compressed.
    docker_cli(&["tag", BUSYBOX, &first]);
    let first_tar = dir.join("first.tar");
    docker_cli(&["save", "-o", &first_tar.display().to_string(), &first]);
    docker_cli(&["rmi", &first]);
    std::fs::write(dir.join("broken.tar"), b"this is not an image archive").expect("broken");

    n.write_manifest("a.yaml", &pod("pre-a", &[("c", &first, Some("Never"))]));
    n.start(&[&format!("--image-preload-dir={}", dir.display())]);
    // Loaded before the pod started: it runs with pull policy Never at once.
    wait_running_id(&n, "pre-a", "c");
    assert!(
        n.log().contains("loaded image archive") && n.log().contains(&first),
        "{}",
        n.log()
    );
    let named = wait_for("the broken archive named", LONG, || {
        n.log()
            .lines()
            .find(|l| l.contains("broken.tar") && l.contains("cannot be loaded"))
            .map(str::to_string)
    });
    eprintln!("preload: {named}");
    let (_, verbose) = n.healthz_get("/healthz?verbose");
    assert!(
        verbose.contains("image-preload") && verbose.contains("broken.tar"),
        "{verbose}"
    );

    // An archive that appears later is loaded without a restart.
    docker_cli(&["tag", BUSYBOX, &second]);
    let saved = docker_cli(&["save", &second]);
    docker_cli(&["rmi", &second]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &saved.stdout).expect("gzip");
    let bytes = gz.finish().expect("gzip");
    // Written beside and renamed in, as a copy into the directory should be.
    std::fs::write(dir.join(".second.tar.gz.part"), &bytes).expect("write");
    std::fs::rename(dir.join(".second.tar.gz.part"), dir.join("second.tar.gz")).expect("rename");
    n.write_manifest("b.yaml", &pod("pre-b", &[("c", &second, Some("Never"))]));
    wait_running_id(&n, "pre-b", "c");
    assert!(n.log().contains(&second), "{}", n.log());
}
