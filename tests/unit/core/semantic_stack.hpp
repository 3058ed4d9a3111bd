// Puts the semantics layer on top of a proxy thread's transport, as the
// Context does (ProxyOptions::upper_layers); *layer, when given, receives it
// once the thread is made (touch it only from tasks the thread runs, or
// while it is stopped).
#pragma once

#include <memory>

#include "core/log.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/semantics/semantic_transport.hpp"

namespace courier::testing {

inline void stack_semantics(ProxyOptions& options, const SemanticsOptions& semantics, Logger& log,
                            AtomicMailbox* mailbox = nullptr, SemanticTransport** layer = nullptr) {
  options.world_size = semantics.world_size;
  options.upper_layers = [semantics, mailbox, &log, layer](ProxyTransport& below) {
    auto top = std::make_unique<SemanticTransport>(below, semantics, mailbox, log);
    if (layer != nullptr) *layer = top.get();
    return top;
  };
}

}  // namespace courier::testing
