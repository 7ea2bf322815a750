#include "dist/net_iface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <poll.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "dist/dist_context.hpp"

namespace trainer::dist {
namespace {

std::string ipv4_text(const sockaddr* sa) {
  char buf[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  return buf;
}

// The interface that owns `address`, "" if none does.
std::string interface_of(const std::string& address) {
  for (const auto& [name, addr] : ipv4_interfaces())
    if (addr == address) return name;
  return "";
}

// The local address the kernel would send from to reach `host`: connect() on a UDP socket only
// picks the route and the source address. "" when the name does not resolve or nothing routes.
std::string address_toward(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port > 0 ? port : 9).c_str(), &hints, &res) != 0 || !res) return "";
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
      out = ipv4_text(reinterpret_cast<sockaddr*>(&local));
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out == "0.0.0.0" ? "" : out;
}

NetChoice named_interface(const std::string& name, const std::string& why) {
  for (const auto& [iface, addr] : ipv4_interfaces())
    if (iface == name) return {iface, addr, why};
  throw DistError(why + " '" + name + "': this host has no up interface of that name with an IPv4 address; it has: " +
                  known_interfaces());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ipv4_interfaces() {
  std::vector<std::pair<std::string, std::string>> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && (a->ifa_flags & IFF_UP))
      out.emplace_back(a->ifa_name, ipv4_text(a->ifa_addr));
  ::freeifaddrs(list);
  return out;
}

std::string known_interfaces() {
  std::string s;
  for (const auto& [name, addr] : ipv4_interfaces()) s += (s.empty() ? "" : ", ") + name + " " + addr;
  return s.empty() ? "none with an IPv4 address" : s;
}

NetChoice choose_interface(const LaunchEnv& env, const std::string& configured, const GetEnv& getenv_fn) {
  if (!configured.empty()) return named_interface(configured, "dist.interface");
  if (const char* v = getenv_fn("GLOO_SOCKET_IFNAME"); v && *v) {
    std::string first(v);
    first = first.substr(0, first.find(','));
    return named_interface(first, "GLOO_SOCKET_IFNAME");
  }
  if (env.local_world_size == env.world_size) return {interface_of("127.0.0.1"), "127.0.0.1", "every rank on this node"};
  if (!env.master_addr.empty()) {
    const std::string a = address_toward(env.master_addr, env.master_port);
    if (!a.empty()) return {interface_of(a), a, "routes to MASTER_ADDR " + env.master_addr};
  }
  return {"", "", "the address this host's name resolves to (c10d's default)"};
}

std::string tcp_unreachable(const std::string& host, int port, std::chrono::milliseconds wait) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res)
    return "the name " + host + " does not resolve (" + ::gai_strerror(rc) + ")";
  std::string why = "no answer";
  for (addrinfo* a = res; a && !why.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) err = ETIMEDOUT;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    ::close(fd);
    why = err == 0 ? "" : err == ETIMEDOUT ? "no answer" : std::strerror(err);
  }
  ::freeaddrinfo(res);
  return why;
}

std::string describe(const NetChoice& n) {
  if (n.address.empty()) return n.reason;
  return (n.interface.empty() ? "" : n.interface + " ") + n.address + " (" + n.reason + ")";
}

int free_local_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("launch: socket(): " + std::string(std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("launch: no free port on 127.0.0.1: " + std::string(std::strerror(errno)));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace trainer::dist
