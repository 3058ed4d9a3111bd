// libcourier-nic-ofi.so: libfabric RDM endpoints over shm or tcp, the
// backend Courier uses where no RDMA NIC exists (docs/nic-ofi.md).
//
// The backend object and the entry points are nic/ofi's, shared with
// nic-efa; this file says what makes nic-ofi: its knobs, what it may
// promise, and the network interface its tcp endpoints listen on
// (COURIER_OFI_IFACE, docs/security.md).
#include <courier/abi/nic_v1.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "nic/ofi/ofi_backend.hpp"
#include "nic/ofi/ofi_plugin_entries.hpp"
#include "nic/plugin_claims.hpp"

namespace courier::nic_ofi {
namespace {

constexpr const char* kIfaceKnob = "COURIER_OFI_IFACE";

constexpr ofi::BackendTraits kTraits = {
    .name = "ofi",
    .description =
        "libfabric RDM endpoints over shm or tcp (one-sided writes, remote CQ data, atomics)",
    .provider_knob = "COURIER_OFI_PROVIDER",
    .provider_default = "shm",
    .provider_allowed = "shm|tcp",
    .provider_help =
        "libfabric provider: shm (processes of one host) or tcp (tcp;ofi_rxm, any IP network)",
    .write_timeout_knob = "COURIER_OFI_WRITE_TIMEOUT_S",
    // shm and tcp are the transports themselves, not stand-ins for hardware.
    .hardware_value = nullptr,
    .hardware_name = nullptr,
    .hardware_missing = nullptr,
    .may_claim_ordered_writes = true,
    .may_claim_loopback = true,
    .may_claim_cheap_registration = true,
    .may_offer_atomics = true,
    .max_imm_bytes = 8,
    .device_memory = false,
};

// With COURIER_OFI_IFACE set over tcp: the libfabric domain to use is the
// interface it names (tcp lists one domain per interface, each with that
// interface's address as its endpoints' source address, so their listeners
// bind there). An unknown one fails init naming the knob.
constexpr ofi::BackendTraits on_interface(ofi::BackendTraits traits) {
  traits.device_knob = kIfaceKnob;
  return traits;
}
constexpr ofi::BackendTraits kTraitsOnIface = on_interface(kTraits);

constexpr courier_knob_v1 kKnobs[] = {
    {kTraits.provider_knob, kTraits.provider_default, kTraits.provider_allowed,
     kTraits.provider_help},
    {kTraits.write_timeout_knob, ofi::kWriteTimeoutDefault, ofi::kWriteTimeoutAllowed,
     "seconds after which a write without completion is reported as failed (-ETIMEDOUT); "
     "0 turns the watchdog off"},
    {kIfaceKnob, "", nullptr,
     "network interface (e.g. eth1) whose address the tcp provider's endpoints listen on; "
     "empty: the first interface libfabric lists; an unknown one stops start-up; no effect "
     "over shm"},
};

using Entries = nic::PluginEntries<ofi::PluginFamily>;

// The names of this host's network interfaces, for the error message.
std::string interface_names() {
  std::string names;
  if (struct if_nameindex* list = if_nameindex()) {
    for (const struct if_nameindex* i = list; i->if_index != 0; ++i) {
      names += (names.empty() ? "" : ", ") + std::string(i->if_name);
    }
    if_freenameindex(list);
  }
  return names.empty() ? "none found" : names;
}

// init with COURIER_OFI_IFACE applied: a name that is no interface of this
// host is refused whatever the provider (a typo must not pass unnoticed until
// the job moves to tcp); over tcp the backend opens that interface's domain.
int init(const courier_host_services_v1* host, void** backend) {
  return nic::guarded<ofi::set_error>("init", [&] {
    const char* iface = host && host->get_env ? host->get_env(host->ctx, kIfaceKnob) : nullptr;
    if (!iface || !*iface) return Entries::init<kTraits>(host, backend);
    if (if_nametoindex(iface) == 0) {
      return ofi::set_error(-ENODEV, "%s='%s' is not valid: no network interface of that name (%s)",
                            kIfaceKnob, iface, interface_names().c_str());
    }
    const char* provider = host->get_env(host->ctx, kTraits.provider_knob);
    if (provider && std::strcmp(provider, "tcp") == 0) {
      return Entries::init<kTraitsOnIface>(host, backend);
    }
    const int rc = Entries::init<kTraits>(host, backend);
    if (rc == 0 && host->log) {
      const std::string line = std::string(kIfaceKnob) + "=" + iface + " has no effect over " +
                               (provider && *provider ? provider : kTraits.provider_default) +
                               ": only tcp listens on a network interface";
      host->log(host->ctx, COURIER_LOG_INFO, kTraits.name, line.c_str());
    }
    return rc;
  });
}

constexpr courier_nic_plugin_v1 with_interface_init(courier_nic_plugin_v1 plugin) {
  plugin.init = &init;
  return plugin;
}

// No device of its own: the fallback, for RDMA devices no backend claims
// and machines without one (shm within a host, tcp across hosts).
constexpr courier_nic_claim_v1 kClaims[] = {
    {.driver = nullptr, .pci_vendor = 0, .pci_device = 0, .flags = COURIER_NIC_CLAIM_FALLBACK},
};

constexpr courier_nic_plugin_v1 kPlugin =
    nic::with_claims(with_interface_init(ofi::make_nic_plugin<kTraits>(kKnobs)), kClaims);

}  // namespace
}  // namespace courier::nic_ofi

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_ofi::kPlugin;
}
