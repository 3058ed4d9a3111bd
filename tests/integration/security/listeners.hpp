// The TCP sockets a process listens on, read from /proc the way `ss -ltnp`
// finds them: the socket inodes among /proc/PID/fd, matched against the
// LISTEN entries of /proc/PID/net/tcp and tcp6 (the process's own network
// namespace). Shared by data_path_check (a rank looks at itself) and
// data_path_stranger (a process outside the job looks at a rank).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace courier::test {

struct Listener {
  sockaddr_storage address{};  // sockaddr_in or sockaddr_in6, port included
  socklen_t length = 0;
  std::string text;  // "127.0.0.1:41234", "[::1]:41234"
  std::string host;  // "127.0.0.1", "::1"
};

namespace detail {

inline std::set<unsigned long> socket_inodes(pid_t pid) {
  std::set<unsigned long> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* listing = opendir(dir.c_str());
  if (!listing) return inodes;
  while (const dirent* entry = readdir(listing)) {
    char target[128];
    const std::string link = dir + "/" + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
  }
  closedir(listing);
  return inodes;
}

// /proc/net/tcp writes each 32-bit word of an address in host byte order.
inline void parse_words(const std::string& hex, uint32_t* words, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    words[i] = static_cast<uint32_t>(std::strtoul(hex.substr(8 * i, 8).c_str(), nullptr, 16));
  }
}

inline void read_table(const std::string& path, bool ipv6, const std::set<unsigned long>& inodes,
                       std::vector<Listener>* out) {
  std::ifstream table(path);
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (!fields || state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
    const size_t colon = local.find(':');
    if (colon == std::string::npos) continue;
    const auto port =
        static_cast<uint16_t>(std::strtoul(local.substr(colon + 1).c_str(), nullptr, 16));
    Listener l;
    char host[INET6_ADDRSTRLEN] = "";
    if (ipv6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&l.address);
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(port);
      uint32_t words[4];
      parse_words(local.substr(0, colon), words, 4);
      std::memcpy(&sin6->sin6_addr, words, sizeof words);
      l.length = sizeof *sin6;
      inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
      l.host = host;
      l.text = "[" + l.host + "]:" + std::to_string(port);
    } else {
      auto* sin = reinterpret_cast<sockaddr_in*>(&l.address);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(port);
      uint32_t word = 0;
      parse_words(local.substr(0, colon), &word, 1);
      std::memcpy(&sin->sin_addr, &word, sizeof word);
      l.length = sizeof *sin;
      inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
      l.host = host;
      l.text = l.host + ":" + std::to_string(port);
    }
    out->push_back(l);
  }
}

}  // namespace detail

// Every TCP socket of process `pid` in the LISTEN state.
inline std::vector<Listener> tcp_listeners(pid_t pid) {
  const std::set<unsigned long> inodes = detail::socket_inodes(pid);
  std::vector<Listener> found;
  const std::string net = "/proc/" + std::to_string(pid) + "/net/";
  detail::read_table(net + "tcp", false, inodes, &found);
  detail::read_table(net + "tcp6", true, inodes, &found);
  return found;
}

}  // namespace courier::test
