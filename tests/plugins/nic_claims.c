/* NIC plugins declaring device claims (NIC ABI 1.3), built once per variant
 * into tests/plugins/claims/ (CLAIMS_VARIANT picks it):
 *
 *   libcourier-nic-claims.so      minor 3: a driver, a PCI device and the
 *                                 fallback; usable, all three read
 *   libcourier-nic-minor2.so      a 1.2 plugin: its struct ends before the
 *                                 claims (what lies beyond it is not its
 *                                 own); usable, claims nothing
 *   libcourier-nic-newer.so       a later minor: a claim with a flag this
 *                                 core does not know is skipped, the rest read
 *   libcourier-nic-nodevice.so    rejected: "device claim #1 names no device
 *                                 (set driver, pci_vendor, or COURIER_NIC_CLAIM_FALLBACK)"
 *   libcourier-nic-novendor.so    rejected: "device claim #0 gives PCI device
 *                                 1021 without its PCI vendor"
 *   libcourier-nic-badfallback.so rejected: "device claim #0 is
 *                                 COURIER_NIC_CLAIM_FALLBACK but names a device
 *                                 (a fallback serves what no claim names)"
 *   libcourier-nic-badflags.so    rejected: "device claim #0 has unknown flags 0x80"
 *   libcourier-nic-nulltable.so   rejected: "declares 2 device claims but its
 *                                 claims table is NULL"
 */
#include <stddef.h>

#include "stub_nic.h"

#define FUTURE_FLAG (1u << 7) /* no minor defines it yet */

#if CLAIMS_VARIANT == 0
#define NAME "claims"
static const courier_nic_claim_v1 claims[] = {
    {.driver = "vendor_nic"},
    {.pci_vendor = 0x5e1e, .pci_device = 0x0001},
    {.flags = COURIER_NIC_CLAIM_FALLBACK},
};
#elif CLAIMS_VARIANT == 1
#define NAME "minor2"
static const courier_nic_claim_v1 claims[] = {{.driver = "mlx5"}};
#elif CLAIMS_VARIANT == 2
#define NAME "newer"
static const courier_nic_claim_v1 claims[] = {
    {.driver = "future_nic", .flags = FUTURE_FLAG},
    {.driver = "newer_nic"},
};
#elif CLAIMS_VARIANT == 3
#define NAME "nodevice"
static const courier_nic_claim_v1 claims[] = {{.driver = "x"}, {.driver = ""}};
#elif CLAIMS_VARIANT == 4
#define NAME "novendor"
static const courier_nic_claim_v1 claims[] = {{.pci_device = 0x1021}};
#elif CLAIMS_VARIANT == 5
#define NAME "badfallback"
static const courier_nic_claim_v1 claims[] = {
    {.driver = "mlx5", .flags = COURIER_NIC_CLAIM_FALLBACK}};
#elif CLAIMS_VARIANT == 6
#define NAME "badflags"
static const courier_nic_claim_v1 claims[] = {{.driver = "mlx5", .flags = FUTURE_FLAG}};
#elif CLAIMS_VARIANT == 7
#define NAME "nulltable"
#else
#error "CLAIMS_VARIANT must be 0..7"
#endif

static const courier_nic_plugin_v1 plugin = {
#if CLAIMS_VARIANT == 1
    /* As built against nic_v1.h 1.2: the struct ended at describe. */
    .header = {offsetof(courier_nic_plugin_v1, claims), COURIER_NIC_ABI_MAJOR, 2, NAME},
#elif CLAIMS_VARIANT == 2
    .header = {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR + 1,
               NAME},
#else
    .header = STUB_NIC_HEADER(NAME),
#endif
    STUB_NIC_ENTRIES,
#if CLAIMS_VARIANT == 7
    .claims = NULL,
    .num_claims = 2,
#else
    .claims = claims,
    .num_claims = sizeof claims / sizeof claims[0],
#endif
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
