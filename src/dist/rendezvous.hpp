// The rendezvous of a job's ranks, before any process group exists (dist_context.cpp creates them):
// the store they meet at (a TCPStore that rank 0 or the launcher hosts at MASTER_ADDR:MASTER_PORT,
// or a file store), the prefix of this attempt's keys, and what the ranks agree on in it first.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "config/config.hpp"
#include "dist/launch_env.hpp"
#include "dist/net_iface.hpp"

namespace trainer::dist {

// dist.store names a file ("file:///shared/path"), not "" (a TCPStore).
bool is_file_store(const config::DistConfig& cfg);

// The prefix of every key this attempt of this job puts in the store.
std::string key_namespace(const LaunchEnv& env, const config::DistConfig& cfg);

// This rank's connection to the job's store (rank 0 hosts a TCPStore unless a launcher's agent does);
// a client gives up after `timeout` naming why, and ends early on a stop signal (RendezvousStopped).
c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, const config::DistConfig& cfg,
                                           std::chrono::milliseconds timeout);

// Before the process group: the ranks' world sizes, each rank started once, no rank advertising a
// loopback address to a rank on another host, and rank 0's config hash on every rank. A rank that
// finds a difference calls the meeting off in `meeting` (the process group's store), so every rank
// stops with its reason at once, and throws DistError.
void agree_on_membership(c10d::Store& store, const LaunchEnv& env, const std::string& ns, c10d::Store& meeting,
                         bool hosts_store, const std::string& config_hash, const NetChoice& net);

}  // namespace trainer::dist
