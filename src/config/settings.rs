//! The settings table: every flag and `KubeletConfiguration` field rkubelet reads, one
//! entry each. It is the one place a setting is declared; `settings_table!` (in
//! [`super::table`]) generates from it the `Layer` each source fills, the
//! `KubeletConfig` the kubelet reads, the flag parser's list, the file's decoding and
//! `--help`, and README's flag table is checked against it.
//!
//! Over 800 lines: one table of ~80 settings, each a few lines of help; split, there
//! would be two places to declare a setting.
//!
//! Adding a setting is one entry here (then using its `KubeletConfig` field): its help
//! text; its flag parser (`parse:` replaces, `append:` adds, for repeatable list flags);
//! the flag, spelled as upstream's, with the placeholder `--help` shows; the
//! `KubeletConfiguration` v1beta1 field (its JSON name), its reader and two example
//! values (the tests below read each one from a file and check the flag wins over it);
//! and the default, spelled as the flag would be, with a one-line reason where it is
//! not upstream's or not obvious. A setting without a default is an `Option` in
//! `KubeletConfig`, `None` when unset or empty. Precedence is upstream's: flags over the
//! file over defaults; the two special cases (`readOnlyPort`, `enableServer`) are in
//! `merge`, in the parent module.
//!
//! Inputs are entries that `load` consumes itself rather than passing on: the config
//! file's path, the host name override (which becomes the checked node name) and
//! `enableServer` (which becomes `port: 0`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::table::Spec;
use super::values::{text, yaml, AuthorizationMode, Taint};
use wire::tls::TlsVersion;

settings_table! {
    builtin_flags {
        Spec {
            name: "help",
            short: Some('h'),
            value: None,
            help: "Print this help and exit.",
        },
        Spec {
            name: "version",
            short: None,
            value: None,
            help: "Print the version and exit.",
        },
    }
    inputs {
        config: PathBuf {
            help: "Read a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) from this file. \
                   Flags given on the command line override its values.",
            parse: text::path,
            flag: "config" <"file">,
        }
        hostname_override: String {
            help: "Use this as the node name instead of the host name. It is lowercased, and \
                   each static pod's name ends in a dash and it.",
            parse: text::any_string,
            flag: "hostname-override" <"name">,
        }
        enable_server: bool {
            help: "false: no authenticated server (rkubelet sets the port to 0).",
            parse: text::boolean,
            file: "enableServer", decode: yaml::boolean, examples: ["false", "true"],
        }
    }
    settings {
        static_pod_path: PathBuf {
            help: "Directory of static pod manifests to run (its .yaml, .yml and .json files, \
                   not hidden ones), or one manifest file. Empty: none.",
            parse: text::any_path,
            flag: "pod-manifest-path" <"path">,
            file: "staticPodPath", decode: yaml::path,
            examples: ["/etc/kubernetes/manifests", "/srv/pods"],
        }
        root_dir: PathBuf {
            help: "Directory for the kubelet's own files (volume mounts, plugins, checkpoints).",
            parse: text::path,
            flag: "root-dir" <"path">,
            // Upstream's is /var/lib/kubelet; ours differs so both may run on one host.
            default: ROOT_DIR = "/var/lib/rkubelet",
        }
        container_runtime_endpoint: String {
            help: "The container runtime's endpoint: a Docker engine or a CRI v1 runtime \
                   (containerd, CRI-O), told apart by what answers on the socket.",
            parse: text::string,
            flag: "container-runtime-endpoint" <"endpoint">,
            file: "containerRuntimeEndpoint", decode: yaml::string,
            examples: ["unix:///run/a.sock", "unix:///run/b.sock"],
            // Docker's socket: rkubelet drives Docker directly (the dockershim era's default).
            default: CONTAINER_RUNTIME_ENDPOINT = "unix:///var/run/docker.sock",
        }
        runtime_request_timeout: Duration {
            help: "Timeout of each call to a CRI runtime (a stop adds its grace period, an \
                   exec its own timeout; pulls have their own).",
            parse: text::duration,
            flag: "runtime-request-timeout" <"duration">,
            file: "runtimeRequestTimeout", decode: yaml::duration,
            examples: ["30s", "10s"],
            // Upstream's: a create or start on a loaded node can take this long.
            default: RUNTIME_REQUEST_TIMEOUT = "2m0s",
        }
        image_service_endpoint: String {
            help: "The CRI image service's endpoint when it is not the runtime's own socket \
                   (a CRI runtime only). Empty: --container-runtime-endpoint.",
            parse: text::any_string,
            flag: "image-service-endpoint" <"endpoint">,
            file: "imageServiceEndpoint", decode: yaml::string,
            examples: ["unix:///run/i.sock", "unix:///run/j.sock"],
            // Upstream's: the runtime serves its images itself.
            default: IMAGE_SERVICE_ENDPOINT = "",
        }
        pod_infra_container_image: String {
            help: "Image of each pod's sandbox (\"pause\") container.",
            parse: text::string,
            flag: "pod-infra-container-image" <"image">,
            // Upstream's current sandbox image.
            default: POD_INFRA_CONTAINER_IMAGE = "registry.k8s.io/pause:3.10",
        }
        network_plugin: String {
            help: "The network plugin that gives pods their network: empty for Docker's \
                   bridge, cni (the CNI plugins of --cni-conf-dir on each sandbox), or \
                   kubenet (a bridge cbr0 over the node's pod CIDR).",
            parse: text::network_plugin,
            flag: "network-plugin" <"name">,
            // Upstream's (the dockershim era's) default: Docker's own bridge.
            default: NETWORK_PLUGIN = "",
        }
        cni_bin_dir: String {
            help: "Directories of the CNI plugins' binaries, comma-separated, searched in \
                   order (Debian installs them in /usr/lib/cni).",
            parse: text::string,
            flag: "cni-bin-dir" <"dirs">,
            default: CNI_BIN_DIR = "/opt/cni/bin",
        }
        cni_conf_dir: PathBuf {
            help: "Directory of CNI network configurations: the first valid .conflist, .conf \
                   or .json by name is the network, read again when the files change.",
            parse: text::path,
            flag: "cni-conf-dir" <"dir">,
            default: CNI_CONF_DIR = "/etc/cni/net.d",
        }
        cni_cache_dir: PathBuf {
            help: "Directory where the CNI plugins' results are kept (libcni's cache), so a \
                   sandbox's network is taken down with what set it up, after a restart too.",
            parse: text::path,
            flag: "cni-cache-dir" <"dir">,
            default: CNI_CACHE_DIR = "/var/lib/cni/cache",
        }
        pod_cidr: String {
            help: "The node's pod CIDR (one of each family, comma-separated) when there is \
                   no API server; with one, the Node's spec.podCIDRs is used.",
            parse: text::pod_cidr,
            flag: "pod-cidr" <"cidr">,
            file: "podCIDR", decode: yaml::pod_cidr, examples: ["10.88.1.0/24", "10.88.2.0/24"],
            default: POD_CIDR = "",
        }
        non_masquerade_cidr: String {
            help: "With kubenet, pod traffic to outside this CIDR is masqueraded; 0.0.0.0/0 \
                   masquerades none.",
            parse: text::cidr,
            flag: "non-masquerade-cidr" <"cidr">,
            default: NON_MASQUERADE_CIDR = "10.0.0.0/8",
        }
        hairpin_mode: String {
            help: "How kubenet lets a pod reach itself through a service: promiscuous-bridge \
                   (cbr0 promiscuous), hairpin-veth (hairpin on each veth) or none.",
            parse: text::hairpin_mode,
            flag: "hairpin-mode" <"mode">,
            file: "hairpinMode", decode: yaml::hairpin_mode,
            examples: ["hairpin-veth", "none"],
            default: HAIRPIN_MODE = "promiscuous-bridge",
        }
        network_plugin_mtu: u32 {
            help: "The MTU of kubenet's bridge; 0 takes the smallest of the host's \
                   interfaces.",
            parse: text::non_negative_int,
            flag: "network-plugin-mtu" <"mtu">,
            default: NETWORK_PLUGIN_MTU = "0",
        }
        healthz_port: u16 {
            help: "Port of the localhost healthz endpoint; 0 disables it.",
            parse: text::port,
            flag: "healthz-port" <"port">,
            file: "healthzPort", decode: yaml::port, examples: ["1234", "4321"],
            // pkg/cluster/ports: KubeletHealthzPort.
            default: HEALTHZ_PORT = "10248",
        }
        healthz_bind_address: IpAddr {
            help: "IP address the healthz server listens on.",
            parse: text::ip,
            flag: "healthz-bind-address" <"ip">,
            file: "healthzBindAddress", decode: yaml::ip, examples: ["10.0.0.2", "'::1'"],
            // Health is a local concern; upstream binds it to loopback.
            default: HEALTHZ_BIND_ADDRESS = "127.0.0.1",
        }
        read_only_port: u16 {
            help: "Port of the unauthenticated read-only server; 0 disables it. The default \
                   is 0 when --config is given, as upstream's.",
            parse: text::port,
            flag: "read-only-port" <"port">,
            file: "readOnlyPort", decode: yaml::port, examples: ["10256", "10257"],
            // pkg/cluster/ports: KubeletReadOnlyPort; a config file's default is 0 (`merge`).
            default: READ_ONLY_PORT = "10255",
        }
        address: IpAddr {
            help: "IP address the kubelet servers listen on.",
            parse: text::ip,
            flag: "address" <"ip">,
            file: "address", decode: yaml::ip, examples: ["10.0.0.1", "127.0.0.1"],
            default: ADDRESS = "0.0.0.0",
        }
        port: u16 {
            help: "Port of the authenticated kubelet server (HTTPS); 0 disables it.",
            parse: text::port,
            flag: "port" <"port">,
            file: "port", decode: yaml::nonzero_port, examples: ["10251", "10252"],
            // pkg/cluster/ports: KubeletPort.
            default: PORT = "10250",
        }
        tls_cert_file: PathBuf {
            help: "Serving certificate of the kubelet port (PEM, intermediates after it). \
                   Without it and --tls-private-key-file, a self-signed pair is made in \
                   --cert-dir.",
            parse: text::any_path,
            flag: "tls-cert-file" <"file">,
            file: "tlsCertFile", decode: yaml::path, examples: ["/etc/a.crt", "/etc/b.crt"],
        }
        tls_private_key_file: PathBuf {
            help: "Private key of --tls-cert-file (PEM).",
            parse: text::any_path,
            flag: "tls-private-key-file" <"file">,
            file: "tlsPrivateKeyFile", decode: yaml::path,
            examples: ["/etc/a.key", "/etc/b.key"],
        }
        cert_dir: PathBuf {
            help: "Directory of the self-signed kubelet.crt and kubelet.key (when no \
                   --tls-cert-file is given) and of the client certificates from TLS \
                   bootstrap and rotation (kubelet-client-current.pem). Empty: <root-dir>/pki.",
            parse: text::any_path,
            flag: "cert-dir" <"path">,
        }
        tls_min_version: TlsVersion {
            help: "Lowest TLS version the kubelet port accepts: VersionTLS12 or VersionTLS13.",
            parse: text::tls_version,
            flag: "tls-min-version" <"version">,
            file: "tlsMinVersion", decode: yaml::tls_version,
            examples: ["VersionTLS13", "VersionTLS12"],
            // Upstream's empty means Go's server default, TLS 1.2; rustls has nothing older.
            default: TLS_MIN_VERSION = "VersionTLS12",
        }
        tls_cipher_suites: Vec<String> {
            help: "Comma-separated TLS 1.2 cipher suites of the kubelet port, in upstream's \
                   (Go's) names; repeatable. TLS 1.3's are not configurable (their names are \
                   taken and change nothing), as upstream's; names rustls lacks (CBC, RSA key \
                   exchange, RC4, 3DES) are left out with a warning, and TLS 1.2 is off when \
                   none is left. Empty: rustls's (ECDHE with AES-GCM or ChaCha20-Poly1305).",
            append: text::cipher_suites,
            flag: "tls-cipher-suites" <"suites">,
            file: "tlsCipherSuites", decode: yaml::cipher_suites,
            examples: ["[TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]",
                       "[TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256]"],
            default: "",
        }
        client_ca_file: PathBuf {
            help: "CA bundle (PEM) that client certificates on the kubelet port are verified \
                   against; the user is the certificate's CN, its groups its O. Empty: no \
                   client certificates.",
            parse: text::any_path,
            flag: "client-ca-file" <"file">,
            file: "authentication.x509.clientCAFile", decode: yaml::path,
            examples: ["/etc/ca1.crt", "/etc/ca2.crt"],
        }
        anonymous_auth: bool {
            help: "Serve requests without credentials on the kubelet port as system:anonymous \
                   (group system:unauthenticated); false: 401. The default is false when \
                   --config is given, as upstream's.",
            parse: text::boolean,
            flag: "anonymous-auth",
            file: "authentication.anonymous.enabled", decode: yaml::boolean,
            examples: ["true", "false"],
            // applyLegacyDefaults; a config file's default is false (`merge`).
            default: ANONYMOUS_AUTH = "true",
        }
        authentication_token_webhook: bool {
            help: "Authenticate bearer tokens on the kubelet port with a TokenReview to the \
                   API server of --kubeconfig (the user and groups are its answer's); without \
                   a --kubeconfig the port is then not served. The default is true when \
                   --config is given, as upstream's.",
            parse: text::boolean,
            flag: "authentication-token-webhook",
            file: "authentication.webhook.enabled", decode: yaml::boolean,
            examples: ["false", "true"],
            // applyLegacyDefaults; a config file's default is true (`merge`).
            default: AUTHENTICATION_TOKEN_WEBHOOK = "false",
        }
        authentication_token_webhook_cache_ttl: Duration {
            help: "How long a TokenReview's answer (a user, or a refusal) is reused for the \
                   same token; 0 asks every time.",
            parse: text::duration,
            flag: "authentication-token-webhook-cache-ttl" <"duration">,
            file: "authentication.webhook.cacheTTL", decode: yaml::duration,
            examples: ["1m", "30s"],
            default: AUTHENTICATION_TOKEN_WEBHOOK_CACHE_TTL = "2m0s",
        }
        authorization_mode: AuthorizationMode {
            help: "How the kubelet port authorizes requests: AlwaysAllow, or Webhook (a \
                   SubjectAccessReview to the API server of --kubeconfig; without a \
                   --kubeconfig the port is then not served). The default is Webhook when \
                   --config is given, as upstream's.",
            parse: text::authorization_mode,
            flag: "authorization-mode" <"mode">,
            file: "authorization.mode", decode: yaml::authorization_mode,
            examples: ["AlwaysAllow", "Webhook"],
            // applyLegacyDefaults; a config file's default is Webhook (`merge`).
            default: AUTHORIZATION_MODE = "AlwaysAllow",
        }
        authorization_webhook_cache_authorized_ttl: Duration {
            help: "How long a SubjectAccessReview that allowed a request is reused (mode \
                   Webhook); 0 asks every time.",
            parse: text::duration,
            flag: "authorization-webhook-cache-authorized-ttl" <"duration">,
            file: "authorization.webhook.cacheAuthorizedTTL", decode: yaml::duration,
            examples: ["10m", "1m"],
            default: AUTHORIZATION_WEBHOOK_CACHE_AUTHORIZED_TTL = "5m0s",
        }
        authorization_webhook_cache_unauthorized_ttl: Duration {
            help: "How long a SubjectAccessReview that did not allow a request is reused \
                   (mode Webhook); 0 asks every time.",
            parse: text::duration,
            flag: "authorization-webhook-cache-unauthorized-ttl" <"duration">,
            file: "authorization.webhook.cacheUnauthorizedTTL", decode: yaml::duration,
            examples: ["1m", "10s"],
            default: AUTHORIZATION_WEBHOOK_CACHE_UNAUTHORIZED_TTL = "30s",
        }
        enable_debugging_handlers: bool {
            help: "Serve the debugging handlers on the kubelet port (/containerLogs, /logs/, \
                   /run, /exec, /attach, /portForward, /configz, PUT /debug/flags/v). false: \
                   the first six answer 405 \"Debug endpoints are disabled.\", the last two \
                   are not served, as upstream's.",
            parse: text::boolean,
            flag: "enable-debugging-handlers",
            file: "enableDebuggingHandlers", decode: yaml::boolean, examples: ["false", "true"],
            default: ENABLE_DEBUGGING_HANDLERS = "true",
        }
        sync_frequency: Duration {
            help: "Longest time between two syncs of a pod.",
            parse: text::period,
            flag: "sync-frequency" <"duration">,
            file: "syncFrequency", decode: yaml::duration, examples: ["2m", "10s"],
            default: SYNC_FREQUENCY = "1m0s",
        }
        file_check_frequency: Duration {
            help: "Time between two full reads of --pod-manifest-path (changes are also \
                   picked up at once through inotify).",
            parse: text::period,
            flag: "file-check-frequency" <"duration">,
            file: "fileCheckFrequency", decode: yaml::duration, examples: ["5s", "1s"],
            default: FILE_CHECK_FREQUENCY = "20s",
        }
        manifest_url: String {
            help: "URL of static pod manifests to run (one Pod, a PodList, or several \
                   YAML/JSON documents), polled every --http-check-frequency. Empty: none.",
            parse: text::url,
            flag: "manifest-url" <"url">,
            file: "staticPodURL", decode: yaml::url,
            examples: ["http://a/pods", "https://b/pods"],
        }
        manifest_url_headers: Vec<(String, String)> {
            help: "HTTP headers sent with --manifest-url, comma-separated Name:Value pairs. \
                   Repeatable; a name given twice is sent twice, in order.",
            append: text::headers,
            flag: "manifest-url-header" <"'Name:Value,…'">,
            file: "staticPodURLHeader", decode: yaml::headers,
            examples: ["{X-A: [one, two]}", "{X-B: [three]}"],
            default: "",
        }
        http_check_frequency: Duration {
            help: "Time between two fetches of --manifest-url (each has a 10 s timeout).",
            parse: text::period,
            flag: "http-check-frequency" <"duration">,
            file: "httpCheckFrequency", decode: yaml::duration, examples: ["7s", "3s"],
            default: HTTP_CHECK_FREQUENCY = "20s",
        }
        etcd_servers: Vec<String> {
            help: "Comma-separated etcd client URLs to read pods from (failed over in \
                   order). Empty: no etcd source.",
            parse: text::urls,
            flag: "etcd-servers" <"urls">,
            default: "",
        }
        etcd_prefix: String {
            help: "Key prefix of this node's pods in etcd; each key holds a Pod or a PodList \
                   (JSON or YAML).",
            parse: text::etcd_prefix,
            flag: "etcd-prefix" <"prefix">,
            // The layout of the 1.x kubelet's etcd source, one prefix per node.
            default: "/registry/hosts/<node name>/",
        }
        etcd_cafile: PathBuf {
            help: "CA bundle to verify the etcd servers with.",
            parse: text::path,
            flag: "etcd-cafile" <"file">,
        }
        etcd_certfile: PathBuf {
            help: "Client certificate for etcd (with --etcd-keyfile).",
            parse: text::path,
            flag: "etcd-certfile" <"file">,
        }
        etcd_keyfile: PathBuf {
            help: "Client key for etcd (with --etcd-certfile).",
            parse: text::path,
            flag: "etcd-keyfile" <"file">,
        }
        enable_server_source: bool {
            help: "Run pods pushed to the kubelet port (the server source): PUT /pods (the \
                   whole set: a Pod, a PodList or several documents), POST /pods (one pod), \
                   DELETE /pods/<namespace>/<name>, GET /pods?source=server; authorized as \
                   nodes/proxy, static pods named <name>-<node>, kept under \
                   <root-dir>/pods-pushed/ across restarts. false: those writes answer 404.",
            parse: text::boolean,
            flag: "enable-server-source",
            file: "enableServerSource", decode: yaml::boolean, examples: ["true", "false"],
            // Off: a pushed pod is code run on the node; only nodes that want it listen.
            default: ENABLE_SERVER_SOURCE = "false",
        }
        image_preload_dir: PathBuf {
            help: "A directory of image archives (docker save or OCI layout tarballs, \
                   optionally compressed) loaded into the runtime at start, before any pod \
                   starts, and whenever a file appears or changes (looked at every 10 s); \
                   their images are kept from image GC while the archive is there. A broken \
                   archive is logged by name and the others load. Empty: none.",
            parse: text::path,
            flag: "image-preload-dir" <"dir">,
            file: "imagePreloadDir", decode: yaml::path, examples: ["/var/lib/rkubelet/images", "/opt/images"],
        }
        checkpoint_api_pods: bool {
            help: "Keep a checkpoint of each pod the API server binds to this node \
                   (<root-dir>/pod-checkpoints/<uid>.json, written when its spec changes), \
                   and run the checkpointed pods when the API server cannot be reached at \
                   start, until it answers; then a pod deleted or moved away meanwhile is \
                   stopped, the others keep their containers. The trade: a pod deleted while \
                   the node was offline runs until the node reconnects.",
            parse: text::boolean,
            flag: "checkpoint-api-pods",
            file: "checkpointApiPods", decode: yaml::boolean, examples: ["true", "false"],
            // Off, as upstream runs no pod its API server has not confirmed; the
            // shipped unit's config turns it on (README, "Offline nodes").
            default: CHECKPOINT_API_PODS = "false",
        }
        kubeconfig: PathBuf {
            help: "kubeconfig of the API server this node is a member of: its pods are \
                   listed and watched from it, and the Node, its Lease, pod statuses, \
                   mirror pods and events are written to it. Empty: standalone (no API \
                   server).",
            parse: text::any_path,
            flag: "kubeconfig" <"file">,
        }
        bootstrap_kubeconfig: PathBuf {
            help: "kubeconfig with bootstrap credentials (e.g. a bootstrap token). When \
                   --kubeconfig does not exist or its client certificate is expired or \
                   unusable, rkubelet asks the API server of this file for a client \
                   certificate (a CertificateSigningRequest), waits for it to be approved \
                   and issued, writes it to --cert-dir and the kubeconfig to --kubeconfig. \
                   Static pods run meanwhile. Empty: no TLS bootstrap.",
            parse: text::any_path,
            flag: "bootstrap-kubeconfig" <"file">,
        }
        rotate_certificates: bool {
            help: "Request a new client certificate from the API server (a \
                   CertificateSigningRequest) when 70-90% of the current one's lifetime \
                   has passed, and use it without a restart.",
            parse: text::boolean,
            flag: "rotate-certificates",
            file: "rotateCertificates", decode: yaml::boolean, examples: ["true", "false"],
            default: ROTATE_CERTIFICATES = "false",
        }
        register_node: bool {
            help: "With --kubeconfig, create this node's Node object in the API server (and \
                   reconcile an existing one's labels).",
            parse: text::boolean,
            flag: "register-node",
            file: "registerNode", decode: yaml::boolean, examples: ["false", "true"],
            default: REGISTER_NODE = "true",
        }
        node_labels: Vec<(String, String)> {
            help: "Labels to add when registering the node, comma-separated key=value pairs; \
                   repeatable. Keys in kubernetes.io or k8s.io must be ones a kubelet may \
                   set (kubelet.kubernetes.io/, node.kubernetes.io/ or the well-known ones).",
            append: text::node_labels,
            flag: "node-labels" <"key=value,…">,
            default: "",
        }
        register_with_taints: Vec<Taint> {
            help: "Taints to register the node with, comma-separated key=value:Effect; \
                   repeatable.",
            append: text::taints,
            flag: "register-with-taints" <"taints">,
            default: "",
        }
        node_ip: String {
            help: "The node's InternalIP address in its status (and pods' hostIP). Empty: \
                   the host name's address if it is on an interface, else the default \
                   route's interface's, else the first interface's; with --kubeconfig \
                   detected again every node status update, so a changed address (a new \
                   DHCP lease) reaches the Node and the pods' hostIP within one period.",
            parse: text::node_ip,
            flag: "node-ip" <"ip">,
        }
        max_pods: u32 {
            help: "The pods this node has room for (its pods capacity).",
            parse: text::positive_int,
            flag: "max-pods" <"n">,
            file: "maxPods", decode: yaml::positive_int, examples: ["20", "30"],
            default: MAX_PODS = "110",
        }
        kube_reserved: Vec<(String, String)> {
            help: "Resources reserved for the Kubernetes daemons, taken from the node's \
                   allocatable: comma-separated name=quantity of cpu, memory, \
                   ephemeral-storage, pid; repeatable.",
            append: text::reserved,
            flag: "kube-reserved" <"name=quantity,…">,
            file: "kubeReserved", decode: yaml::reserved,
            examples: ["{cpu: 100m}", "{memory: 1Gi, ephemeral-storage: 2Gi}"],
            default: "",
        }
        system_reserved: Vec<(String, String)> {
            help: "Resources reserved for the operating system's daemons, taken from the \
                   node's allocatable, as --kube-reserved.",
            append: text::reserved,
            flag: "system-reserved" <"name=quantity,…">,
            file: "systemReserved", decode: yaml::reserved,
            examples: ["{cpu: 200m}", "{memory: 512Mi}"],
            default: "",
        }
        cgroups_per_qos: bool {
            help: "Build the kubepods cgroup hierarchy (QoS cgroups, one cgroup per pod) \
                   and give each pod's containers their pod's cgroup as parent.",
            parse: text::boolean,
            flag: "cgroups-per-qos",
            file: "cgroupsPerQOS", decode: yaml::boolean, examples: ["false", "true"],
            default: CGROUPS_PER_QOS = "true",
        }
        cgroup_root: String {
            help: "The cgroup the kubepods hierarchy is built under; empty: the root (/).",
            parse: text::any_string,
            flag: "cgroup-root" <"cgroup">,
            file: "cgroupRoot", decode: yaml::string, examples: ["/a", "/b/c"],
            default: "",
        }
        enforce_node_allocatable: Vec<String> {
            help: "Comma-separated levels whose allocatable is enforced with cgroup \
                   limits: pods (the kubepods cgroup), or none; repeatable. \
                   system-reserved and kube-reserved are accepted and not enforced.",
            append: text::enforce_node_allocatable,
            flag: "enforce-node-allocatable" <"levels">,
            file: "enforceNodeAllocatable", decode: yaml::enforce_node_allocatable,
            examples: ["[none]", "[pods, kube-reserved]"],
            default: ENFORCE_NODE_ALLOCATABLE = "pods",
        }
        allowed_unsafe_sysctls: Vec<String> {
            help: "Comma-separated unsafe sysctls or sysctl patterns (ending in *) pods may \
                   set beside the safe set; repeatable. Each must be namespaced: kernel.shm*, \
                   kernel.msg*, kernel.sem, fs.mqueue.*, net.*.",
            append: text::sysctl_patterns,
            flag: "allowed-unsafe-sysctls" <"patterns">,
            file: "allowedUnsafeSysctls", decode: yaml::sysctl_patterns,
            examples: ["[kernel.msg*]", "[net.core.somaxconn, kernel.shm_rmid_forced]"],
            default: "",
        }
        node_status_update_frequency: Duration {
            help: "How often the node's status is computed (and sent if it changed).",
            parse: text::period,
            flag: "node-status-update-frequency" <"duration">,
            file: "nodeStatusUpdateFrequency", decode: yaml::duration, examples: ["20s", "4s"],
            default: NODE_STATUS_UPDATE_FREQUENCY = "10s",
        }
        node_status_report_frequency: Duration {
            help: "How often the node's status is sent when it has not changed (config file \
                   only).",
            parse: text::period,
            file: "nodeStatusReportFrequency", decode: yaml::duration, examples: ["1m", "2m"],
            default: NODE_STATUS_REPORT_FREQUENCY = "5m0s",
        }
        node_status_max_images: i32 {
            help: "The most images listed in the node's status (largest first); -1: all.",
            parse: text::max_images,
            flag: "node-status-max-images" <"n">,
            file: "nodeStatusMaxImages", decode: yaml::max_images, examples: ["10", "-1"],
            default: NODE_STATUS_MAX_IMAGES = "50",
        }
        node_lease_duration_seconds: u32 {
            help: "The node lease's duration; it is renewed every quarter of it (config file \
                   only).",
            parse: text::positive_int,
            file: "nodeLeaseDurationSeconds", decode: yaml::positive_int, examples: ["30", "60"],
            default: NODE_LEASE_DURATION_SECONDS = "40",
        }
        cluster_dns: Vec<String> {
            help: "Comma-separated nameserver IPs of pods with dnsPolicy ClusterFirst; \
                   repeatable. Without it such pods get the node's resolver (the Default \
                   policy), as upstream's.",
            append: text::ips,
            flag: "cluster-dns" <"ips">,
            file: "clusterDNS", decode: yaml::ips,
            examples: ["[10.0.0.10]", "[10.0.0.11, 10.0.0.12]"],
            default: "",
        }
        cluster_domain: String {
            help: "The cluster's DNS domain, e.g. cluster.local: search paths and pod FQDNs.",
            parse: text::any_string,
            flag: "cluster-domain" <"domain">,
            file: "clusterDomain", decode: yaml::string, examples: ["cluster.local", "example.org"],
            default: "",
        }
        resolv_conf: String {
            help: "Resolver file that pods with dnsPolicy Default get; empty: none. An \
                   /etc/resolv.conf naming only systemd-resolved's stub (127.0.0.53) is \
                   replaced by /run/systemd/resolve/resolv.conf, as kubeadm configures it.",
            parse: text::any_string,
            flag: "resolv-conf" <"file">,
            file: "resolvConf", decode: yaml::resolv_conf, examples: ["/etc/r1.conf", "/etc/r2.conf"],
            // The node's own resolver.
            default: RESOLV_CONF = "/etc/resolv.conf",
        }
        serialize_image_pulls: bool {
            help: "Pull one image at a time (config file only).",
            parse: text::boolean,
            file: "serializeImagePulls", decode: yaml::boolean, examples: ["false", "true"],
            // Upstream's: one pull at a time.
            default: SERIALIZE_IMAGE_PULLS = "true",
        }
        max_parallel_image_pulls: u32 {
            help: "With serializeImagePulls false, how many pulls may run at once (config \
                   file only; at most 10 here).",
            parse: text::positive_int,
            file: "maxParallelImagePulls", decode: yaml::positive_int, examples: ["1", "~"],
        }
        eviction_hard: String {
            help: "Hard eviction thresholds, comma-separated signal<value (memory.available, \
                   nodefs.available, nodefs.inodesFree, imagefs.available, \
                   imagefs.inodesFree, pid.available, allocatableMemory.available; \
                   containerfs.* follow nodefs, or imagefs on a filesystem of its own; a \
                   quantity or a percentage). Setting it \
                   replaces the defaults wholesale: memory.available<100Mi, \
                   nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%.",
            parse: text::any_string,
            flag: "eviction-hard" <"signal<value,…">,
        }
        eviction_soft: String {
            help: "Soft eviction thresholds, as --eviction-hard; each needs its \
                   --eviction-soft-grace-period. Empty: none.",
            parse: text::any_string,
            flag: "eviction-soft" <"signal<value,…">,
        }
        eviction_soft_grace_period: String {
            help: "How long each soft threshold must hold before a pod is evicted, \
                   comma-separated signal=duration.",
            parse: text::any_string,
            flag: "eviction-soft-grace-period" <"signal=duration,…">,
        }
        eviction_minimum_reclaim: String {
            help: "Once a threshold is met, how much beyond it to reclaim before it counts as \
                   resolved, comma-separated signal=quantity (or percentage).",
            parse: text::any_string,
            flag: "eviction-minimum-reclaim" <"signal=value,…">,
        }
        eviction_max_pod_grace_period: u32 {
            help: "The longest termination grace (seconds) of a pod evicted for a soft \
                   threshold (the smaller of it and the pod's); hard thresholds evict at once.",
            parse: text::non_negative_int,
            flag: "eviction-max-pod-grace-period" <"seconds">,
            default: EVICTION_MAX_POD_GRACE_PERIOD = "0",
        }
        eviction_pressure_transition_period: Duration {
            help: "How long a pressure condition stays True after its threshold was last met \
                   (so it does not flap).",
            parse: text::duration,
            flag: "eviction-pressure-transition-period" <"duration">,
            default: EVICTION_PRESSURE_TRANSITION_PERIOD = "5m0s",
        }
        log_file: PathBuf {
            help: "Also write the log to this file (buffered, flushed every \
                   --log-flush-frequency and at exit); stderr gets every line as before.",
            parse: text::path,
            flag: "log-file" <"path">,
        }
        log_file_max_size: u32 {
            help: "Megabytes after which --log-file is renamed to <file>.1 and started anew; \
                   0: no limit.",
            parse: text::non_negative_int,
            flag: "log-file-max-size" <"MB">,
            // klog's.
            default: LOG_FILE_MAX_SIZE = "1800",
        }
        log_flush_frequency: Duration {
            help: "Longest time a line waits in the --log-file buffer.",
            parse: text::period,
            flag: "log-flush-frequency" <"duration">,
            default: LOG_FLUSH_FREQUENCY = "5s",
        }
        minimum_container_ttl_duration: Duration {
            help: "How long a finished container is kept at least before container GC may \
                   remove it (deprecated upstream in favour of eviction; flag only).",
            parse: text::duration,
            flag: "minimum-container-ttl-duration" <"duration">,
            default: MINIMUM_CONTAINER_TTL_DURATION = "0s",
        }
        maximum_dead_containers_per_container: i32 {
            help: "The most dead instances of one container kept (the newest; flag only).",
            parse: text::int,
            flag: "maximum-dead-containers-per-container" <"n">,
            default: MAXIMUM_DEAD_CONTAINERS_PER_CONTAINER = "1",
        }
        maximum_dead_containers: i32 {
            help: "The most dead containers kept on the node; -1: no limit (flag only).",
            parse: text::int,
            flag: "maximum-dead-containers" <"n">,
            default: MAXIMUM_DEAD_CONTAINERS = "-1",
        }
        container_gc_period: Duration {
            help: "rkubelet's own: time between two container GC passes (upstream's is a \
                   fixed 1m; tests shorten it).",
            parse: text::period,
            flag: "container-gc-period" <"duration">,
            default: CONTAINER_GC_PERIOD = "1m0s",
        }
        image_gc_period: Duration {
            help: "rkubelet's own: time between two image GC passes (upstream's is a fixed \
                   5m; tests shorten it).",
            parse: text::period,
            flag: "image-gc-period" <"duration">,
            default: IMAGE_GC_PERIOD = "5m0s",
        }
        image_gc_high_threshold_percent: u8 {
            help: "Disk usage of the image filesystem at or above which image GC runs; 100 \
                   disables it.",
            parse: text::percent,
            flag: "image-gc-high-threshold" <"percent">,
            file: "imageGCHighThresholdPercent", decode: yaml::percent, examples: ["90", "70"],
            default: IMAGE_GC_HIGH_THRESHOLD_PERCENT = "85",
        }
        image_gc_low_threshold_percent: u8 {
            help: "Disk usage image GC frees down to.",
            parse: text::percent,
            flag: "image-gc-low-threshold" <"percent">,
            file: "imageGCLowThresholdPercent", decode: yaml::percent, examples: ["60", "50"],
            default: IMAGE_GC_LOW_THRESHOLD_PERCENT = "80",
        }
        image_minimum_gc_age: Duration {
            help: "How long an unused image is kept at least after it was first seen.",
            parse: text::duration,
            flag: "minimum-image-ttl-duration" <"duration">,
            file: "imageMinimumGCAge", decode: yaml::duration, examples: ["5m", "30s"],
            default: IMAGE_MINIMUM_GC_AGE = "2m0s",
        }
        image_maximum_gc_age: Duration {
            help: "An image unused this long is removed whatever the disk usage; 0: never \
                   (config file only).",
            parse: text::duration,
            file: "imageMaximumGCAge", decode: yaml::duration, examples: ["24h", "1h"],
            default: IMAGE_MAXIMUM_GC_AGE = "0s",
        }
        container_log_max_size: u64 {
            help: "A container's log file is rotated at this size (Docker's json-file \
                   max-size; on a CRI runtime, rkubelet's container log manager).",
            parse: text::bytes,
            flag: "container-log-max-size" <"quantity">,
            file: "containerLogMaxSize", decode: yaml::bytes, examples: ["5Mi", "1Mi"],
            default: CONTAINER_LOG_MAX_SIZE = "10Mi",
        }
        container_log_max_files: u32 {
            help: "The most log files of one container, the current one included (Docker's \
                   json-file max-file; on a CRI runtime, rkubelet's; at least 2).",
            parse: text::log_files,
            flag: "container-log-max-files" <"n">,
            file: "containerLogMaxFiles", decode: yaml::log_files, examples: ["3", "2"],
            default: CONTAINER_LOG_MAX_FILES = "5",
        }
        container_log_monitor_interval: Duration {
            help: "How often the container log manager checks the log files' sizes, on a \
                   CRI runtime; at least 3s (config file only).",
            parse: text::log_monitor_interval,
            file: "containerLogMonitorInterval", decode: yaml::log_monitor_interval,
            examples: ["5s", "1m"],
            default: CONTAINER_LOG_MONITOR_INTERVAL = "10s",
        }
        pod_logs_dir: PathBuf {
            help: "Where each container's log link lives: \
                   <dir>/<namespace>_<pod>_<uid>/<container>/<restartCount>.log (upstream's \
                   podLogsDir; the flag is rkubelet's own).",
            parse: text::path,
            flag: "pod-logs-dir" <"path">,
            file: "podLogsDir", decode: yaml::path, examples: ["/srv/pods", "/tmp/pods"],
            default: POD_LOGS_DIR = "/var/log/pods",
        }
        container_logs_dir: PathBuf {
            help: "rkubelet's own: where the log shippers' links \
                   <pod>_<namespace>_<container>-<id>.log live (upstream's is fixed).",
            parse: text::path,
            flag: "container-logs-dir" <"path">,
            default: CONTAINER_LOGS_DIR = "/var/log/containers",
        }
        verbosity: u8 {
            help: "Log verbosity, 0 to 10: 0-1 info, 2-4 debug, 5 and up trace (debug builds \
                   only: release builds have no trace lines). Without it, RUST_LOG (else info) \
                   decides.",
            parse: text::verbosity,
            flag: "v" <"level"> short 'v',
            file: "logging.verbosity", decode: yaml::verbosity, examples: ["3", "5"],
        }
    }
    more_defaults {
        /// v1beta1's `readOnlyPort` default: a config file opts into the secure defaults,
        /// where the unauthenticated port is off.
        pub const READ_ONLY_PORT_WITH_CONFIG_FILE: u16 = 0;
        /// v1beta1's `authentication.anonymous.enabled` default: off, as above.
        pub const ANONYMOUS_AUTH_WITH_CONFIG_FILE: bool = false;
        /// v1beta1's `authentication.webhook.enabled` default: tokens are reviewed.
        pub const AUTHENTICATION_TOKEN_WEBHOOK_WITH_CONFIG_FILE: bool = true;
        /// v1beta1's `authorization.mode` default: ask the API server.
        pub const AUTHORIZATION_MODE_WITH_CONFIG_FILE: super::AuthorizationMode =
            super::AuthorizationMode::Webhook;
        /// `--cert-dir`'s default, under `--root-dir` (upstream: /var/lib/kubelet/pki).
        pub const CERT_DIR_IN_ROOT_DIR: &str = "pki";
        /// Where Linux keeps the host name, used as the node name without
        /// `--hostname-override` (what Go's `os.Hostname` reads).
        pub const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";
    }
}

#[cfg(test)]
mod tests {
    use serde_norway::{Mapping, Value};

    use super::*;
    use crate::config::{load_with, Loaded};
    use base::testutil::TempDir;

    /// A config file setting `field` (`logging.verbosity` nests) to the YAML `value`.
    fn config_file(field: Option<(&str, &str)>) -> String {
        let mut doc = Mapping::new();
        doc.insert("apiVersion".into(), "kubelet.config.k8s.io/v1beta1".into());
        doc.insert("kind".into(), "KubeletConfiguration".into());
        if let Some((field, value)) = field {
            let mut v: Value = serde_norway::from_str(value).expect("example is YAML");
            let mut parts: Vec<&str> = field.split('.').collect();
            let top = parts.remove(0);
            for p in parts.into_iter().rev() {
                v = Value::Mapping(Mapping::from_iter([(p.into(), v)]));
            }
            doc.insert(top.into(), v);
        }
        serde_norway::to_string(&doc).expect("serialize")
    }

    /// A YAML example as the flag spells it: scalars as they are, lists joined with
    /// commas, a map of name to values as `name:value` pairs.
    fn flag_form(example: &str) -> String {
        let scalar = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => serde_norway::to_string(other)
                .expect("scalar")
                .trim()
                .to_string(),
        };
        match serde_norway::from_str::<Value>(example).expect("example is YAML") {
            Value::Sequence(items) => items.iter().map(scalar).collect::<Vec<_>>().join(","),
            // A map of scalars (reserved resources): name=value pairs.
            Value::Mapping(m) if m.values().all(|v| !v.is_sequence()) => m
                .iter()
                .map(|(k, v)| format!("{}={}", scalar(k), scalar(v)))
                .collect::<Vec<_>>()
                .join(","),
            Value::Mapping(m) => m
                .iter()
                .flat_map(|(k, vs)| {
                    let vs = vs.as_sequence().cloned().unwrap_or_default();
                    let k = scalar(k);
                    vs.into_iter().map(move |v| format!("{k}:{}", scalar(&v)))
                })
                .collect::<Vec<_>>()
                .join(","),
            other => scalar(&other),
        }
    }

    /// The configuration from these flags and config file text.
    fn load(dir: &TempDir, file: Option<&str>, flags: &[String]) -> KubeletConfig {
        let host = dir.write("hostname", "my-host\n");
        let mut args = vec!["rkubelet".to_string()];
        if let Some(text) = file {
            let cfg = dir.write("config.yaml", text);
            args.push(format!("--config={}", cfg.display()));
        }
        args.extend_from_slice(flags);
        match load_with(&args, &host) {
            Ok(Loaded::Run(c)) => c,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn every_file_field_reads_what_its_flag_reads() {
        let dir = TempDir::new("roundtrip");
        let bare = config_file(None);
        for e in ENTRIES {
            let (Some(field), Some([example, _])) = (e.file, e.examples) else {
                assert!(e.file.is_none(), "{}: a file field needs examples", e.name);
                continue;
            };
            let Some(flag) = e.flag else { continue };
            let from_file = load(&dir, Some(&config_file(Some((field, example)))), &[]);
            let from_flag = [format!("--{flag}={}", flag_form(example))];
            let from_flag = load(&dir, Some(&bare), &from_flag);
            assert_eq!(from_file, from_flag, "{field}: {example} reads as --{flag}");
        }
    }

    #[test]
    fn every_file_field_takes_effect_and_every_flag_wins_over_it() {
        let dir = TempDir::new("precedence");
        let bare = load(&dir, Some(&config_file(None)), &[]);
        for e in ENTRIES {
            let (Some(field), Some([a, b])) = (e.file, e.examples) else {
                continue;
            };
            let from_file = load(&dir, Some(&config_file(Some((field, a)))), &[]);
            assert_ne!(from_file, bare, "{field}: {a} takes effect");
            let b_file = load(&dir, Some(&config_file(Some((field, b)))), &[]);
            assert_ne!(b_file, from_file, "{field}: the examples differ");
            let Some(flag) = e.flag else { continue };
            let flag_b = [format!("--{flag}={}", flag_form(b))];
            let both = load(&dir, Some(&config_file(Some((field, a)))), &flag_b);
            assert_eq!(both, b_file, "--{flag} wins over {field}");
        }
    }

    #[test]
    fn every_default_means_what_its_flag_would() {
        let dir = TempDir::new("defaults");
        let defaults = load(&dir, None, &[]);
        for e in ENTRIES {
            let (Some(flag), Some(default)) = (e.flag, e.default) else {
                continue;
            };
            let given = [format!(
                "--{flag}={}",
                default.replace("<node name>", "my-host")
            )];
            assert_eq!(load(&dir, None, &given), defaults, "--{flag}");
        }
    }

    /// README's flag table, from the table: one row per flag.
    fn readme_table() -> String {
        let mut out =
            String::from("| flag | config file field | default | meaning |\n|---|---|---|---|\n");
        let code = |s: &str| format!("`{s}`");
        for e in ENTRIES {
            let Some(spec) = e.flag.and_then(|f| SPECS.iter().find(|s| s.name == f)) else {
                continue;
            };
            let mut flag = format!("--{}", spec.name);
            if let Some(v) = spec.value {
                flag = format!("{flag} {v}");
            }
            let mut flag = code(&flag);
            if let Some(c) = spec.short {
                flag.push_str(&format!(", `-{c}`"));
            }
            let field = e.file.map(code).unwrap_or_default();
            let default = e
                .default
                .filter(|d| !d.is_empty())
                .map(code)
                .unwrap_or_default();
            // Markdown would take `<pod name>` for a tag and `|` for a column.
            let help = e.help.replace('<', "\\<").replace('|', "\\|");
            out.push_str(&format!("| {flag} | {field} | {default} | {help} |\n"));
        }
        out
    }

    const README_BEGIN: &str = "<!-- flags: generated from src/config/settings.rs by its test \
                                readme_flag_table_is_the_settings_table; \
                                UPDATE_README=1 rewrites it -->\n";
    const README_END: &str = "<!-- end of flags -->\n";

    #[test]
    fn readme_flag_table_is_the_settings_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let readme = std::fs::read_to_string(&path).expect("README.md");
        let (Some(begin), Some(end)) = (readme.find(README_BEGIN), readme.find(README_END)) else {
            panic!("README.md lacks the flag table's markers:\n{README_BEGIN}{README_END}");
        };
        let begin = begin + README_BEGIN.len();
        let want = readme_table();
        if readme[begin..end] == want {
            return;
        }
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{want}{}", &readme[..begin], &readme[end..]);
            std::fs::write(&path, updated).expect("write README.md");
            return;
        }
        panic!(
            "README.md's flag table is not the settings table; run \
             UPDATE_README=1 cargo test --lib readme_flag_table. It should be:\n{want}"
        );
    }
}
