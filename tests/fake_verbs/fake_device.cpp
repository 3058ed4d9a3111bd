// Device list, open/close and the device, port and GID queries.
#include <endian.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "fake_hca.hpp"
#include "fake_log.hpp"
#include "fake_verbs_api.hpp"
#include "fake_world.hpp"

namespace courier::fake_verbs {
namespace {

// The context's HCA if it belongs to this process (a context opened before
// fork() belongs to the parent's adapter).
Hca* live_hca(ibv_context* ctx, const char* verb) {
  Context* context = ctx ? context_of(ctx) : nullptr;
  if (!context) {
    refuse(EINVAL, verb, "not a context of the fake verbs device");
    return nullptr;
  }
  if (context->hca->owner_pid() != ::getpid()) {
    refuse(EINVAL, verb, "context %s was opened by process %d before fork(); open it again here",
           context->device->handle.ibv.name, static_cast<int>(context->hca->owner_pid()));
    return nullptr;
  }
  return context->hca.get();
}

ibv_device_attr device_attr(const Hca& hca) {
  const Profile& profile = hca.profile();
  ibv_device_attr attr{};
  std::snprintf(attr.fw_ver, sizeof(attr.fw_ver), "%s", profile.fw_ver.c_str());
  attr.node_guid = htobe64(node_guid(profile, hca.number()));
  attr.sys_image_guid = attr.node_guid;
  attr.max_mr_size = profile.max_mr_size;
  attr.page_size_cap = 0xfffffffffffff000ULL;
  attr.vendor_id = profile.vendor_id;
  attr.vendor_part_id = profile.vendor_part_id;
  attr.hw_ver = 0;
  attr.max_qp = profile.max_qp;
  attr.max_qp_wr = profile.max_qp_wr;
  attr.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                          IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
  attr.max_sge = profile.max_sge;
  attr.max_sge_rd = profile.max_sge;
  attr.max_cq = profile.max_qp;
  attr.max_cqe = profile.max_cqe;
  attr.max_mr = 1 << 24;
  attr.max_pd = 1 << 24;
  attr.max_qp_rd_atom = profile.max_qp_rd_atom;
  attr.max_qp_init_rd_atom = profile.max_qp_rd_atom;
  attr.max_res_rd_atom = profile.max_qp_rd_atom * profile.max_qp;
  attr.atomic_cap = profile.atomic_cap;
  attr.max_ah = 1 << 24;
  attr.max_srq = 0;  // SRQs are not modelled
  attr.max_pkeys = profile.roce() ? 1 : 128;
  attr.local_ca_ack_delay = 16;
  attr.phys_port_cnt = 1;
  return attr;
}

ibv_port_attr port_attr(const Hca& hca) {
  const Profile& profile = hca.profile();
  ibv_port_attr attr{};
  attr.state = IBV_PORT_ACTIVE;
  attr.max_mtu = IBV_MTU_4096;
  attr.active_mtu = IBV_MTU_4096;
  attr.gid_tbl_len = profile.gid_table_length();
  attr.max_msg_sz = 0x80000000u;
  attr.pkey_tbl_len = profile.roce() ? 1 : 128;
  attr.lid = hca.lid();
  attr.sm_lid = profile.roce() ? 0 : 1;
  attr.max_vl_num = 4;
  attr.subnet_timeout = 18;
  attr.active_width = 2;  // 4X
  attr.active_speed = profile.active_speed;
  attr.phys_state = 5;  // LinkUp
  attr.link_layer = profile.link_layer;
  attr.flags = profile.roce() ? IBV_QPF_GRH_REQUIRED : 0;
  return attr;
}

int query_port_extended(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr, size_t size) {
  Hca* hca = live_hca(ctx, "ibv_query_port");
  if (!hca) return EINVAL;
  if (port_num != 1)
    return refuse(EINVAL, "ibv_query_port", "port %u does not exist (1 port)", port_num);
  const ibv_port_attr filled = port_attr(*hca);
  std::memset(attr, 0, size);
  std::memcpy(attr, &filled, std::min(size, sizeof(filled)));
  return 0;
}

int query_device_extended(ibv_context* ctx, const ibv_query_device_ex_input* input,
                          ibv_device_attr_ex* attr, size_t size) {
  Hca* hca = live_hca(ctx, "ibv_query_device_ex");
  if (!hca) return EINVAL;
  if (input && input->comp_mask) {
    return refuse(EINVAL, "ibv_query_device_ex", "input comp_mask 0x%x is not supported",
                  input->comp_mask);
  }
  ibv_device_attr_ex filled{};
  filled.orig_attr = device_attr(*hca);
  filled.device_cap_flags_ex = filled.orig_attr.device_cap_flags;
  if (hca->profile().on_demand_paging) {
    filled.odp_caps.general_caps = IBV_ODP_SUPPORT;
    filled.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                     IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                                     IBV_ODP_SUPPORT_ATOMIC;
  }
  filled.phys_port_cnt_ex = 1;
  std::memset(attr, 0, size);
  std::memcpy(attr, &filled, std::min(size, sizeof(filled)));
  return 0;
}

}  // namespace
}  // namespace courier::fake_verbs

using namespace courier::fake_verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  const std::vector<Device*> devices = World::get().list_devices();
  auto** list = static_cast<ibv_device**>(std::calloc(devices.size() + 1, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devices.size(); ++i) list[i] = &devices[i]->handle.ibv;
  if (num_devices) *num_devices = static_cast<int>(devices.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

__be64 ibv_get_device_guid(ibv_device* device) {
  Device& fake = *device_of(device);
  if (!World::get().reserve(fake)) return 0;
  return htobe64(node_guid(fake.profile, fake.number));
}

ibv_context* ibv_open_device(ibv_device* device) {
  Device& fake = *device_of(device);
  std::shared_ptr<Hca> hca = World::get().open(fake);
  if (!hca) {
    refuse_errno(ENODEV, "ibv_open_device", "%s: no HCA number is free", device->name);
    return nullptr;
  }
  auto* context = new Context();
  context->handle.impl = context;
  context->hca = std::move(hca);
  context->device = &fake;
  verbs_context& vctx = context->handle.vctx;
  vctx.sz = sizeof(verbs_context);
  vctx.query_port = query_port_extended;
  vctx.query_device_ex = query_device_extended;
  ibv_context& ctx = vctx.context;
  ctx.device = device;
  ctx.cmd_fd = -1;
  ctx.async_fd = -1;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  return &ctx;
}

int ibv_close_device(ibv_context* ctx) {
  Context* context = context_of(ctx);
  if (!context) return refuse(EINVAL, "ibv_close_device", "not a context of the fake device");
  if (context->hca->owner_pid() != ::getpid()) {
    // The parent's context, inherited by fork(): its adapter state is the
    // parent's; let go of nothing here.
    return 0;
  }
  {
    std::lock_guard lock(context->hca->mutex);
    destroy_context_objects(*context->hca, *context);
  }
  World::get().release(*context->device, std::move(context->hca));
  pthread_mutex_destroy(&ctx->mutex);
  delete context;
  return 0;
}

int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  Hca* hca = live_hca(ctx, "ibv_query_device");
  if (!hca) return EINVAL;
  *attr = device_attr(*hca);
  return 0;
}

int ibv_query_port(ibv_context* ctx, uint8_t port_num, _compat_ibv_port_attr* attr) {
  // The old layout is ibv_port_attr up to (not including) port_cap_flags2.
  return query_port_extended(ctx, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                             offsetof(ibv_port_attr, port_cap_flags2));
}

int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                      uint32_t flags, size_t entry_size) {
  Hca* hca = live_hca(ctx, "ibv_query_gid_ex");
  if (!hca) return EINVAL;
  if (flags != 0) return refuse(EINVAL, "ibv_query_gid_ex", "flags 0x%x are not supported", flags);
  if (port_num != 1) return refuse(EINVAL, "ibv_query_gid_ex", "port %u does not exist", port_num);
  if (gid_index >= static_cast<uint32_t>(hca->profile().gid_table_length())) {
    return refuse(EINVAL, "ibv_query_gid_ex", "index %u is beyond the GID table (%d entries)",
                  gid_index, hca->profile().gid_table_length());
  }
  const auto found = gid_entry(hca->profile(), hca->number(), gid_index);
  if (!found) return ENODATA;  // an empty entry
  std::memset(entry, 0, entry_size);
  std::memcpy(entry, &*found, std::min(entry_size, sizeof(*found)));
  return 0;
}

int ibv_query_gid(ibv_context* ctx, uint8_t port_num, int index, ibv_gid* gid) {
  if (index < 0) return -1;
  ibv_gid_entry entry{};
  const int result =
      _ibv_query_gid_ex(ctx, port_num, static_cast<uint32_t>(index), &entry, 0, sizeof(entry));
  if (result == ENODATA) {  // as rdma-core: an empty entry reads as the zero GID
    std::memset(gid, 0, sizeof(*gid));
    return 0;
  }
  if (result != 0) return -1;
  *gid = entry.gid;
  return 0;
}

}  // extern "C"
