// Which network interface and address this rank's collectives use: the address Gloo's pairs bind to
// and advertise, and (when configured) NCCL's socket interface. On a multi-homed node the wrong
// choice is the classic multi-node failure (ranks that advertise an address the others cannot
// reach, a hang until the timeout), so the choice is explicit, logged, and printed by trainer check.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "dist/launch_env.hpp"

namespace trainer::dist {

struct NetChoice {
  std::string interface;  // "eth0"; "" when only an address was chosen
  std::string address;    // the IPv4 address bound and advertised
  std::string reason;     // why: "dist.interface", "GLOO_SOCKET_IFNAME", "routes to MASTER_ADDR", ...
};

// Every IPv4 address of an up interface of this host (network namespace), in the kernel's order.
std::vector<std::pair<std::string, std::string>> ipv4_interfaces();  // (interface, address)
std::string known_interfaces();  // "lo 127.0.0.1, eth0 10.0.0.2": for messages

// "" when something at host:port accepts a TCP connection within `wait` (nothing is sent: a c10d
// store's server drops an unvalidated connection in silence), else why not ("Connection refused",
// "no answer", "the name X does not resolve (...)"). Clients probe before they construct a c10d
// TCPStore: each failed construction printed c10d's error with a stack trace, every half second,
// for as long as node 0 was not up yet (found from outside: hundreds of lines per node).
std::string tcp_unreachable(const std::string& host, int port, std::chrono::milliseconds wait);

// In order: `configured` (dist.interface), else GLOO_SOCKET_IFNAME (its first entry, as c10d
// reads it), else loopback when every rank runs on this node, else the interface whose address
// the kernel routes to MASTER_ADDR (a connected UDP socket: no packet is sent), else "" (c10d's
// default: the address this host's name resolves to). Throws DistError naming the interface asked
// for and the ones this host has when it does not exist, is down, or has no IPv4 address.
NetChoice choose_interface(const LaunchEnv& env, const std::string& configured, const GetEnv& getenv_fn);

// "eth0 10.0.0.2 (routes to MASTER_ADDR)" for logs and trainer check.
std::string describe(const NetChoice& n);

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice).
int free_local_port();

}  // namespace trainer::dist
