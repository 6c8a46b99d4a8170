//! `--network-plugin=kubenet` (dockershim's kubenet): no configuration file; the
//! network is made from the node's pod CIDR (`spec.podCIDRs` of the Node, or
//! `--pod-cidr` standalone) as a CNI configuration list of the plugins users install:
//! `bridge` on `cbr0` with `host-local` addresses of the pod CIDR, `loopback`,
//! `portmap` for hostPorts, and `firewall` and `bandwidth` where they are installed.
//! Traffic from the pods to anywhere outside `--non-masquerade-cidr` is masqueraded
//! by one iptables rule per pod CIDR. Until a pod CIDR is known the network is not
//! ready, with upstream's message. A pod CIDR that changes is taken without a restart:
//! pods made from then on get addresses of the new one and `cbr0` its gateway; the
//! pods already running keep their addresses (and lose the old gateway) until they
//! are made again.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cni::conf::NetworkConfigList;
use serde_json::{json, Value};

/// The bridge every pod's veth joins (upstream's `BridgeName`).
pub(crate) const BRIDGE: &str = "cbr0";

/// The network's name: its host-local directory and cache entries are under it.
const NETWORK_NAME: &str = "kubenet";

/// The bridge MTU when none is set and no interface tells one (upstream's
/// `fallbackMTU`).
const FALLBACK_MTU: u32 = 1460;

/// The longest one iptables call may take (it waits for the xtables lock).
const IPTABLES_TIMEOUT: Duration = Duration::from_secs(10);

/// The masquerade rule's comment, as upstream's.
const MASQUERADE_COMMENT: &str = "kubenet: SNAT for outbound traffic from cluster";

/// Why the network is not ready before a pod CIDR is known (upstream's words).
pub(crate) const NO_POD_CIDR: &str =
    "kubenet does not have netConfig. This is most likely due to lack of PodCIDR";

/// The plugins the network cannot do without (upstream's, and portmap for hostPorts).
const REQUIRED_PLUGINS: &[&str] = &["bridge", "host-local", "loopback", "portmap"];

/// kubenet's settings (`--network-plugin-mtu`, `--hairpin-mode`,
/// `--non-masquerade-cidr`).
#[derive(Clone, Debug)]
pub(crate) struct Kubenet {
    /// The bridge's MTU; 0 finds it (the smallest of the host's interfaces).
    pub(crate) mtu: u32,
    /// `promiscuous-bridge`, `hairpin-veth` or `none`.
    pub(crate) hairpin_mode: String,
    /// Traffic to this CIDR keeps the pod's address; `0.0.0.0/0` turns the rule off.
    pub(crate) non_masquerade_cidr: String,
}

/// An IP network, its address masked to its prefix (`10.88.1.0/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x::/n`; host bits are cleared.
    pub(crate) fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (address/prefix)"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR: {addr:?} is not an IP address"))?;
        let most = if addr.is_ipv6() { 128 } else { 32 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= most)
            .ok_or_else(|| format!("{s:?} is not a CIDR: the prefix is not 0-{most}"))?;
        let addr = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Ok(Cidr { addr, prefix })
    }

    pub(crate) fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    /// Covers every address of its family.
    fn is_everything(&self) -> bool {
        self.prefix == 0
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The pod CIDRs of a `spec.podCIDRs` (or a comma-separated `--pod-cidr`): at most
/// one of each family, as upstream allows.
pub(crate) fn parse_pod_cidrs(cidrs: &[String]) -> Result<Vec<Cidr>, String> {
    let parsed: Vec<Cidr> = cidrs
        .iter()
        .flat_map(|c| c.split(','))
        .filter(|c| !c.trim().is_empty())
        .map(Cidr::parse)
        .collect::<Result<_, _>>()?;
    if parsed.len() > 2 || (parsed.len() == 2 && parsed[0].is_ipv6() == parsed[1].is_ipv6()) {
        return Err(format!(
            "{}: at most one pod CIDR of each family",
            cidrs.join(",")
        ));
    }
    Ok(parsed)
}

impl Kubenet {
    /// The network for `cidrs` with the bridge's `mtu`: upstream's kubenet
    /// configuration as a list, with `firewall` and `bandwidth` when
    /// `installed(plugin)` says they are there.
    pub(crate) fn network(
        &self,
        cidrs: &[Cidr],
        mtu: u32,
        installed: &dyn Fn(&str) -> bool,
    ) -> Result<NetworkConfigList, String> {
        let ranges: Vec<Value> = cidrs
            .iter()
            .map(|c| json!([{"subnet": c.to_string()}]))
            .collect();
        let routes: Vec<Value> = cidrs
            .iter()
            .map(|c| json!({"dst": if c.is_ipv6() { "::/0" } else { "0.0.0.0/0" }}))
            .collect();
        let mut plugins = vec![
            json!({
                "type": "bridge",
                "bridge": BRIDGE,
                "mtu": mtu,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": self.hairpin_mode == "hairpin-veth",
                "promiscMode": self.hairpin_mode == "promiscuous-bridge",
                // A new pod CIDR's gateway replaces the old one on cbr0 (as upstream's
                // kubenet cleared the bridge's other addresses).
                "forceAddress": true,
                "ipam": {"type": "host-local", "ranges": ranges, "routes": routes},
            }),
            json!({"type": "loopback"}),
            json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
        ];
        // Docker's FORWARD policy is DROP: the firewall plugin lets each pod's traffic
        // through it.
        if installed("firewall") {
            plugins.push(json!({"type": "firewall"}));
        }
        if installed("bandwidth") {
            plugins.push(json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}));
        }
        let list = json!({"cniVersion": "1.0.0", "name": NETWORK_NAME, "plugins": plugins});
        let bytes = serde_json::to_vec(&list).map_err(|e| e.to_string())?;
        cni::conf::parse(Path::new("kubenet.conflist"), &bytes).map_err(|e| e.to_string())
    }

    /// The bridge MTU: the one set, else the smallest of the host's interfaces that
    /// are up and neither loopback nor point-to-point (upstream's `findMinMTU`), else
    /// [`FALLBACK_MTU`].
    pub(crate) fn bridge_mtu(&self, sys_class_net: &Path) -> u32 {
        if self.mtu > 0 {
            return self.mtu;
        }
        min_mtu(sys_class_net).unwrap_or_else(|| {
            log::warn!("kubenet: no interface tells an MTU; the bridge's is {FALLBACK_MTU}");
            FALLBACK_MTU
        })
    }

    /// The masquerade rule of one pod CIDR (`iptables -t nat` arguments after the
    /// action and chain), or none when the CIDR's family is not the one of
    /// `--non-masquerade-cidr` or that covers everything.
    fn masquerade_rule(&self, pod_cidr: &Cidr) -> Option<Vec<String>> {
        let keep = Cidr::parse(&self.non_masquerade_cidr).ok()?;
        if keep.is_everything() || keep.is_ipv6() != pod_cidr.is_ipv6() {
            return None;
        }
        Some(
            [
                "-m",
                "comment",
                "--comment",
                MASQUERADE_COMMENT,
                "-s",
                &pod_cidr.to_string(),
                "-m",
                "addrtype",
                "!",
                "--dst-type",
                "LOCAL",
                "!",
                "-d",
                &keep.to_string(),
                "-j",
                "MASQUERADE",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        )
    }

    /// Makes sure the masquerade rule of each pod CIDR is in `nat POSTROUTING`.
    pub(crate) fn ensure_masquerade(&self, cidrs: &[Cidr]) -> Result<(), String> {
        for c in cidrs {
            let Some(rule) = self.masquerade_rule(c) else {
                continue;
            };
            let bin = iptables(c);
            if iptables_run(bin, "-C", &rule).is_ok() {
                continue;
            }
            iptables_run(bin, "-A", &rule)
                .map_err(|e| format!("cannot add the masquerade rule for {c}: {e}"))?;
            log::info!(
                "kubenet: traffic from {c} leaving {} is masqueraded",
                self.non_masquerade_cidr
            );
        }
        Ok(())
    }

    /// Removes the masquerade rules of pod CIDRs the node no longer has.
    pub(crate) fn remove_masquerade(&self, cidrs: &[Cidr]) {
        for c in cidrs {
            let Some(rule) = self.masquerade_rule(c) else {
                continue;
            };
            let bin = iptables(c);
            while iptables_run(bin, "-C", &rule).is_ok() {
                if let Err(e) = iptables_run(bin, "-D", &rule) {
                    log::warn!("kubenet: cannot remove the masquerade rule for {c}: {e}");
                    break;
                }
            }
        }
    }
}

/// The plugins of [`REQUIRED_PLUGINS`] that none of `bin_dirs` holds.
pub(crate) fn missing_plugins(bin_dirs: &[PathBuf]) -> Vec<&'static str> {
    REQUIRED_PLUGINS
        .iter()
        .copied()
        .filter(|p| !installed(bin_dirs, p))
        .collect()
}

/// Whether one of `bin_dirs` holds the plugin.
pub(crate) fn installed(bin_dirs: &[PathBuf], plugin: &str) -> bool {
    bin_dirs.iter().any(|d| d.join(plugin).is_file())
}

/// Bridged traffic goes through iptables (kube-proxy's rules and the firewall
/// plugin's need it), as upstream's kubenet sets; a failure is said, not fatal.
pub(crate) fn bridge_nf_call_iptables() {
    let path = "/proc/sys/net/bridge/bridge-nf-call-iptables";
    if std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1") {
        return;
    }
    if let Err(e) = std::fs::write(path, "1") {
        log::warn!("kubenet: cannot set {path} to 1 (is br_netfilter loaded?): {e}");
    }
}

/// The smallest MTU of the interfaces under `sys_class_net` that are up and neither
/// loopback nor point-to-point.
fn min_mtu(sys_class_net: &Path) -> Option<u32> {
    const IFF_UP: u32 = 0x1;
    const IFF_LOOPBACK: u32 = 0x8;
    const IFF_POINTOPOINT: u32 = 0x10;
    let read = |p: PathBuf| std::fs::read_to_string(p).ok();
    std::fs::read_dir(sys_class_net)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let dir = e.path();
            let flags = read(dir.join("flags"))?;
            let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok()?;
            let usable = flags & IFF_UP != 0 && flags & (IFF_LOOPBACK | IFF_POINTOPOINT) == 0;
            let mtu: u32 = read(dir.join("mtu"))?.trim().parse().ok()?;
            usable.then_some(mtu)
        })
        .filter(|mtu| *mtu >= 576)
        .min()
}

fn iptables(c: &Cidr) -> &'static str {
    if c.is_ipv6() {
        "ip6tables"
    } else {
        "iptables"
    }
}

/// One `iptables -w -t nat <action> POSTROUTING <rule>`, with a deadline.
fn iptables_run(bin: &str, action: &str, rule: &[String]) -> Result<(), String> {
    let mut cmd = Command::new(bin);
    cmd.args(["-w", "5", "-t", "nat", action, "POSTROUTING"])
        .args(rule);
    let out = base::process::run_with_deadline(&mut cmd, &[], IPTABLES_TIMEOUT, 64 * 1024)
        .map_err(|e| format!("{bin}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{bin} {action}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubenet(hairpin: &str, keep: &str) -> Kubenet {
        Kubenet {
            mtu: 0,
            hairpin_mode: hairpin.into(),
            non_masquerade_cidr: keep.into(),
        }
    }

    #[test]
    fn cidrs_parse_with_their_host_bits_cleared_and_bad_ones_say_why() {
        assert_eq!(
            Cidr::parse("10.88.1.7/24").expect("ok").to_string(),
            "10.88.1.0/24"
        );
        assert_eq!(
            Cidr::parse("fd00:1::5/64").expect("ok").to_string(),
            "fd00:1::/64"
        );
        assert_eq!(
            Cidr::parse("0.0.0.0/0").expect("ok").to_string(),
            "0.0.0.0/0"
        );
        assert_eq!(
            Cidr::parse("10.1.2.3/32").expect("ok").to_string(),
            "10.1.2.3/32"
        );
        for bad in [
            "10.88.1.0",
            "10.88.1.0/33",
            "x/24",
            "fd00::/129",
            "10.0.0.0/-1",
        ] {
            let e = Cidr::parse(bad).expect_err("an error");
            assert!(e.contains(bad), "{e}");
        }
        let two = parse_pod_cidrs(&["10.88.1.0/24,fd00:1::/64".into()]).expect("ok");
        assert_eq!(two.len(), 2);
        assert!(parse_pod_cidrs(&["10.88.1.0/24".into(), "10.88.2.0/24".into()]).is_err());
        assert!(parse_pod_cidrs(&[]).expect("ok").is_empty());
    }

    #[test]
    fn the_network_is_upstreams_bridge_over_the_pod_cidrs_with_the_hairpin_mode() {
        let cidrs = parse_pod_cidrs(&["10.88.1.0/24".into(), "fd00:1::/64".into()]).expect("ok");
        let all = |_: &str| true;
        let net = kubenet("promiscuous-bridge", "10.0.0.0/8")
            .network(&cidrs, 1450, &all)
            .expect("ok");
        assert_eq!(net.name, "kubenet");
        let types: Vec<&str> = net
            .plugins
            .iter()
            .map(|p| p["type"].as_str().expect("ok"))
            .collect();
        assert_eq!(
            types,
            ["bridge", "loopback", "portmap", "firewall", "bandwidth"]
        );
        let bridge = &net.plugins[0];
        assert_eq!(bridge["bridge"], "cbr0");
        assert_eq!(bridge["mtu"], 1450);
        assert_eq!(bridge["promiscMode"], true);
        assert_eq!(bridge["hairpinMode"], false);
        assert_eq!(bridge["forceAddress"], true);
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "10.88.1.0/24"}], [{"subnet": "fd00:1::/64"}]])
        );
        assert_eq!(
            bridge["ipam"]["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
        assert!(net.has_capability("portMappings") && net.has_capability("bandwidth"));

        let none = |_: &str| false;
        let veth = kubenet("hairpin-veth", "10.0.0.0/8")
            .network(&cidrs[..1], 1500, &none)
            .expect("ok");
        assert_eq!(
            veth.plugins.len(),
            3,
            "no firewall or bandwidth without them"
        );
        assert_eq!(veth.plugins[0]["hairpinMode"], true);
        assert_eq!(veth.plugins[0]["promiscMode"], false);
        let off = kubenet("none", "10.0.0.0/8")
            .network(&cidrs[..1], 1500, &none)
            .expect("ok");
        assert_eq!(off.plugins[0]["hairpinMode"], false);
        assert_eq!(off.plugins[0]["promiscMode"], false);
    }

    #[test]
    fn the_masquerade_rule_spares_the_non_masquerade_cidr_and_local_addresses() {
        let pods = Cidr::parse("10.88.1.0/24").expect("ok");
        let rule = kubenet("none", "10.0.0.0/8")
            .masquerade_rule(&pods)
            .expect("ok");
        assert_eq!(
            rule.join(" "),
            "-m comment --comment kubenet: SNAT for outbound traffic from cluster \
             -s 10.88.1.0/24 -m addrtype ! --dst-type LOCAL ! -d 10.0.0.0/8 -j MASQUERADE"
        );
        assert!(kubenet("none", "0.0.0.0/0")
            .masquerade_rule(&pods)
            .is_none());
        let v6 = Cidr::parse("fd00:1::/64").expect("ok");
        assert!(kubenet("none", "10.0.0.0/8").masquerade_rule(&v6).is_none());
    }

    #[test]
    fn the_bridge_mtu_is_the_smallest_usable_interfaces_unless_set() {
        let dir = std::env::temp_dir().join(format!("rkt-mtu-{}", std::process::id()));
        let iface = |name: &str, flags: &str, mtu: &str| {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).expect("ok");
            std::fs::write(d.join("flags"), flags).expect("ok");
            std::fs::write(d.join("mtu"), mtu).expect("ok");
        };
        iface("lo", "0x9\n", "65536\n");
        iface("eth0", "0x1003\n", "1500\n");
        iface("wg0", "0x91\n", "1420\n"); // point-to-point
        iface("eth1", "0x1002\n", "1400\n"); // down
        iface("eth2", "0x1003\n", "9000\n");
        let k = kubenet("none", "10.0.0.0/8");
        assert_eq!(k.bridge_mtu(&dir), 1500);
        assert_eq!(
            Kubenet {
                mtu: 1380,
                ..k.clone()
            }
            .bridge_mtu(&dir),
            1380
        );
        assert_eq!(k.bridge_mtu(&dir.join("none")), FALLBACK_MTU);
        std::fs::remove_dir_all(&dir).expect("ok");
    }
}
