// The exported libibverbs entry points the fake defines, and what the inline
// verbs reach through the ops tables. rdma-core's verbs.h turns some of the
// names into macros (ibv_query_port, ibv_reg_mr); the definitions undo that.
#pragma once

#include <infiniband/verbs.h>

#include "fake_hca.hpp"

#undef ibv_query_port
#undef ibv_reg_mr

namespace courier::fake_verbs {

// Ops the contexts' tables point at (fake_queues.cpp).
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// Releases everything a context still owns (at ibv_close_device), with the
// HCA's lock held.
void destroy_context_objects(Hca& hca, Context& context);

// Invalidates an MR's keys and frees it, with the HCA's lock held.
void release_mr_locked(Hca& hca, Mr& mr);

}  // namespace courier::fake_verbs
