/*
 * fake_graphs.c: stream capture and CUDA graphs of fakecuda (libcuda.so.1), enough for an
 * interposer that must find what a graph's kernels touch and must not break a capture.
 *
 *   - cuStreamBeginCapture_v2 on a created stream (the default streams are refused, as the
 *     legacy one is by the driver): kernels launched into it become kernel nodes, run later.
 *   - During a capture, synchronising the captured stream, or the context while a
 *     global-mode capture (or the caller's thread-local one) is under way, fails with
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture; cuStreamEndCapture
 *     then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as on the driver.
 *   - Graphs hold kernel, memcpy (one layer, no CUDA arrays), memset and child-graph nodes
 *     (a child is copied in, as the driver does); cuGraphGetNodes, cuGraphNodeGetType,
 *     cuGraphKernelNodeGetParams_v2, cuGraphMemcpyNodeGetParams, cuGraphMemsetNodeGetParams
 *     and cuGraphChildGraphNodeGetGraph read them back.
 *   - An executable graph is the nodes flattened (children inlined) in insertion order,
 *     each remembering the node it came from; cuGraphLaunch runs them in that order,
 *     synchronously, stopping at the first failing node. cuGraphExecKernelNodeSetParams_v2,
 *     cuGraphExecMemcpyNodeSetParams, cuGraphExecMemsetNodeSetParams and the generic
 *     cuGraphExecNodeSetParams change one; cuGraphExecUpdate_v2 takes a graph of the same
 *     nodes (types, and kernels' functions) in the same order.
 * Edges are ignored: nodes run in insertion order, which respects any dependency a capture
 * produces. Only kernel launches are captured: a copy or memset queued on a capturing stream
 * runs at once. cuGraphAddDependencies_v2 checks its edges as the driver does (both nodes in
 * the graph; a programmatic edge from a kernel's programmatic or launch-order port to a
 * kernel), and more strictly: a programmatic edge into a kernel whose PTX does not execute
 * griddepcontrol.wait is refused (CUDA_ERROR_INVALID_VALUE). The driver takes one, and the
 * kernel may then read its predecessor's output before it is written: a race a test should
 * see.
 */
#include <cuda.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"

struct CUgraphNode_st {
    CUgraphNodeType type;
    CUfunction f;                       /* kernel nodes */
    unsigned grid[3], block[3], shared;
    unsigned char raw[FK_PARAM_BYTES];
    void *args[FK_MAX_PARAMS];          /* kernelParams, pointing into raw */
    struct CUgraph_st *child;           /* child-graph nodes: the node's own copy */
    CUDA_MEMCPY3D copy;                 /* memcpy nodes */
    CUDA_MEMSET_NODE_PARAMS set;        /* memset nodes */
};

struct CUgraph_st {
    struct CUgraph_st *next;            /* live top-level graphs */
    struct CUgraphNode_st **nodes;
    size_t n, cap;
};

struct fk_exec_node {
    CUgraphNode from;
    struct CUgraphNode_st node;
};

struct CUgraphExec_st {
    struct CUgraphExec_st *next;
    struct fk_exec_node *nodes;
    size_t n;
};

struct fk_capture {
    struct fk_capture *next;
    CUstream s;
    struct CUgraph_st *g;
    CUstreamCaptureMode mode;
    pthread_t thread;
    int invalidated;
};

static struct CUgraph_st *g_graphs;
static struct CUgraphExec_st *g_execs;
static struct fk_capture *g_captures;

/* ---- graphs and nodes ---- */

static struct CUgraph_st *graph_find(CUgraph g)
{
    for (struct CUgraph_st *x = g_graphs; x; x = x->next)
        if (x == g) return x;
    return NULL;
}

static void graph_free(struct CUgraph_st *g)
{
    for (size_t i = 0; g && i < g->n; i++) {
        graph_free(g->nodes[i]->child);
        free(g->nodes[i]);
    }
    if (g) free(g->nodes);
    free(g);
}

static CUresult graph_new(CUgraph *pg, int top_level)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    if (top_level) g->next = g_graphs, g_graphs = g;
    *pg = g;
    return CUDA_SUCCESS;
}

/* Takes the node over, or frees it on failure. */
static CUresult graph_append(struct CUgraph_st *g, struct CUgraphNode_st *node)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        struct CUgraphNode_st **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) return graph_free(node->child), free(node), CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = nodes;
        g->cap = cap;
    }
    g->nodes[g->n++] = node;
    return CUDA_SUCCESS;
}

/* kernelParams of a kernel node point into its own packed copy. */
static void node_args(struct CUgraphNode_st *n)
{
    size_t off[FK_MAX_PARAMS];
    unsigned np = fk_kernel_layout(n->f, off);
    for (unsigned i = 0; i < np; i++) n->args[i] = n->raw + off[i];
}

static struct CUgraphNode_st *kernel_node(CUfunction f, const unsigned grid[3],
                                          const unsigned block[3], unsigned shared,
                                          const unsigned char *raw)
{
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->type = CU_GRAPH_NODE_TYPE_KERNEL;
    n->f = f;
    memcpy(n->grid, grid, sizeof n->grid);
    memcpy(n->block, block, sizeof n->block);
    n->shared = shared;
    memcpy(n->raw, raw, sizeof n->raw);
    node_args(n);
    return n;
}

/* Kernel parameters as cuLaunchKernel takes them, checked the same way. */
static CUresult kernel_params(const CUDA_KERNEL_NODE_PARAMS *p, unsigned char raw[FK_PARAM_BYTES])
{
    if (!p || !p->func) return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    return fk_kernel_check(p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra,
                           raw);
}

static CUresult add_kernel_node(CUgraphNode *pn, CUgraph g, const CUDA_KERNEL_NODE_PARAMS *p)
{
    unsigned char raw[FK_PARAM_BYTES];
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pn || !graph_find(g)) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = kernel_params(p, raw))) return rc;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    struct CUgraphNode_st *n = kernel_node(p->func, grid, block, p->sharedMemBytes, raw);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    if ((rc = graph_append(g, n))) return rc;
    *pn = n;
    return CUDA_SUCCESS;
}

static CUresult graph_copy(const struct CUgraph_st *from, struct CUgraph_st **to)
{
    CUgraph g = NULL;
    CUresult rc = graph_new(&g, 0);
    for (size_t i = 0; !rc && i < from->n; i++) {
        struct CUgraphNode_st *n = malloc(sizeof *n);
        if (!n) { rc = CUDA_ERROR_OUT_OF_MEMORY; break; }
        *n = *from->nodes[i];
        node_args(n);
        n->child = NULL;
        if ((rc = graph_append(g, n))) break;
        if (from->nodes[i]->child) rc = graph_copy(from->nodes[i]->child, &n->child);
    }
    if (rc) return graph_free(g), rc;
    *to = g;
    return CUDA_SUCCESS;
}

static CUresult add_child_node(CUgraphNode *pn, CUgraph g, CUgraph child)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pn || !graph_find(g) || !graph_find(child) || g == child) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->type = CU_GRAPH_NODE_TYPE_GRAPH;
    if ((rc = graph_copy(child, &n->child))) return free(n), rc;
    if ((rc = graph_append(g, n))) return rc;
    *pn = n;
    return CUDA_SUCCESS;
}

/* Memcpy and memset nodes: their parameters are checked when they run, but what the fake
 * cannot run at all is refused here. */
static CUresult add_copy_node(CUgraphNode *pn, CUgraph g, CUgraphNodeType type,
                              const CUDA_MEMCPY3D *copy, const CUDA_MEMSET_NODE_PARAMS *set)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!pn || !graph_find(g) || (type == CU_GRAPH_NODE_TYPE_MEMCPY ? !copy : !set))
        return CUDA_ERROR_INVALID_VALUE;
    if (copy && copy->Depth != 1) return CUDA_ERROR_NOT_SUPPORTED;
    if (set && set->elementSize != 1 && set->elementSize != 2 && set->elementSize != 4)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->type = type;
    if (copy) n->copy = *copy;
    if (set) n->set = *set;
    if ((rc = graph_append(g, n))) return rc;
    *pn = n;
    return CUDA_SUCCESS;
}

/* A node of a live graph, children's included. */
static int node_in(const struct CUgraph_st *g, CUgraphNode node)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i] == node || (g->nodes[i]->child && node_in(g->nodes[i]->child, node)))
            return 1;
    return 0;
}

static struct CUgraphNode_st *node_find(CUgraphNode node)
{
    for (struct CUgraph_st *g = g_graphs; g && node; g = g->next)
        if (node_in(g, node)) return node;
    return NULL;
}

/* cuGraphAddDependencies_v2: n edges from[i] -> to[i] of g, each with edges[i]'s ports and
 * type (all default without edges). */
static CUresult add_edges(CUgraph hg, const CUgraphNode *from, const CUgraphNode *to,
                          const CUgraphEdgeData *edges, size_t n)
{
    struct CUgraph_st *g = graph_find(hg);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        if (!node_in(g, from[i]) || !node_in(g, to[i]) || from[i] == to[i])
            return CUDA_ERROR_INVALID_VALUE;
        const CUgraphEdgeData e = edges ? edges[i] : (CUgraphEdgeData){0};
        if (e.to_port) return CUDA_ERROR_INVALID_VALUE;
        if (e.type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) {
            if (e.from_port) return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        if (e.type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
            (e.from_port != CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC &&
             e.from_port != CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER) ||
            from[i]->type != CU_GRAPH_NODE_TYPE_KERNEL ||
            to[i]->type != CU_GRAPH_NODE_TYPE_KERNEL || !fk_kernel_waits(to[i]->f))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* A child graph's copy, anywhere below `in`. */
static struct CUgraph_st *child_find(CUgraph g, const struct CUgraph_st *in)
{
    for (size_t i = 0; i < in->n; i++) {
        struct CUgraph_st *c = in->nodes[i]->child;
        if (c && (c == g || (c = child_find(g, c)))) return c;
    }
    return NULL;
}

/* A live graph: a top-level one, or a child graph's copy (which
 * cuGraphChildGraphNodeGetGraph hands out). */
static struct CUgraph_st *graph_find_any(CUgraph g)
{
    for (struct CUgraph_st *top = g_graphs, *c; top; top = top->next)
        if (top == g || (c = child_find(g, top))) return top == g ? top : c;
    return NULL;
}

static CUresult get_nodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
    struct CUgraph_st *x = graph_find_any(g);
    if (!x || !n) return CUDA_ERROR_INVALID_VALUE;
    if (nodes) /* the first *n, as the driver; *n becomes the number written */
        for (size_t i = 0; i < *n && i < x->n; i++) nodes[i] = x->nodes[i];
    *n = nodes && *n < x->n ? *n : x->n;
    return CUDA_SUCCESS;
}

static CUresult node_type(CUgraphNode node, CUgraphNodeType *type)
{
    struct CUgraphNode_st *n = node_find(node);
    if (!n || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

static CUresult kernel_node_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
    struct CUgraphNode_st *n = node_find(node);
    if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    *p = (CUDA_KERNEL_NODE_PARAMS){.func = n->f, .gridDimX = n->grid[0], .gridDimY = n->grid[1],
                                   .gridDimZ = n->grid[2], .blockDimX = n->block[0],
                                   .blockDimY = n->block[1], .blockDimZ = n->block[2],
                                   .sharedMemBytes = n->shared, .kernelParams = n->args};
    return CUDA_SUCCESS;
}

static CUresult copy_node_params(CUgraphNode node, CUDA_MEMCPY3D *copy,
                                 CUDA_MEMSET_NODE_PARAMS *set)
{
    struct CUgraphNode_st *n = node_find(node);
    if (!n || (copy ? n->type != CU_GRAPH_NODE_TYPE_MEMCPY : n->type != CU_GRAPH_NODE_TYPE_MEMSET))
        return CUDA_ERROR_INVALID_VALUE;
    if (copy) *copy = n->copy;
    else if (set) *set = n->set;
    else return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult child_graph(CUgraphNode node, CUgraph *pg)
{
    struct CUgraphNode_st *n = node_find(node);
    if (!n || !pg || n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    *pg = n->child;
    return CUDA_SUCCESS;
}

static CUresult graph_destroy(CUgraph g)
{
    struct CUgraph_st **pg = &g_graphs;
    while (*pg && *pg != g) pg = &(*pg)->next;
    if (!g || !*pg) return CUDA_ERROR_INVALID_VALUE;
    for (struct fk_capture *c = g_captures; c; c = c->next)
        if (c->g == g) return CUDA_ERROR_INVALID_VALUE; /* still being captured into */
    *pg = g->next;
    graph_free(g);
    return CUDA_SUCCESS;
}

/* ---- executable graphs ---- */

static size_t flat_count(const struct CUgraph_st *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++)
        n += g->nodes[i]->child ? flat_count(g->nodes[i]->child) : 1;
    return n;
}

static void flatten(const struct CUgraph_st *g, struct fk_exec_node *out, size_t *at)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->child) {
            flatten(g->nodes[i]->child, out, at);
            continue;
        }
        out[*at].from = g->nodes[i];
        out[*at].node = *g->nodes[i];
        node_args(&out[*at].node);
        (*at)++;
    }
}

static CUresult instantiate(CUgraphExec *pe, CUgraph g)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUgraph_st *x = graph_find_any(g);
    if (!pe || !x) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->n = flat_count(x);
    e->nodes = calloc(e->n ? e->n : 1, sizeof *e->nodes);
    if (!e->nodes) return free(e), CUDA_ERROR_OUT_OF_MEMORY;
    size_t at = 0;
    flatten(x, e->nodes, &at);
    e->next = g_execs;
    g_execs = e;
    *pe = e;
    return CUDA_SUCCESS;
}

static struct CUgraphExec_st *exec_find(CUgraphExec e)
{
    for (struct CUgraphExec_st *x = g_execs; x; x = x->next)
        if (x == e) return x;
    return NULL;
}

static CUresult exec_update(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    struct CUgraphExec_st *x = exec_find(e);
    struct CUgraph_st *src = graph_find_any(g);
    if (!x || !src || !info) return CUDA_ERROR_INVALID_VALUE;
    *info = (CUgraphExecUpdateResultInfo){.result = CU_GRAPH_EXEC_UPDATE_SUCCESS};
    size_t n = flat_count(src), at = 0;
    struct fk_exec_node *nodes = calloc(n ? n : 1, sizeof *nodes);
    if (!nodes) return CUDA_ERROR_OUT_OF_MEMORY;
    flatten(src, nodes, &at);
    int same = n == x->n;
    for (size_t i = 0; same && i < n; i++)
        same = nodes[i].node.type == x->nodes[i].node.type && nodes[i].node.f == x->nodes[i].node.f;
    if (!same) {
        free(nodes);
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    free(x->nodes);
    x->nodes = nodes;
    return CUDA_SUCCESS;
}

/* The executable graph's copy of `node`, of type `type`. */
static struct CUgraphNode_st *exec_node(CUgraphExec e, CUgraphNode node, CUgraphNodeType type)
{
    struct CUgraphExec_st *x = exec_find(e);
    for (size_t i = 0; x && i < x->n; i++)
        if (x->nodes[i].from == node)
            return x->nodes[i].node.type == type ? &x->nodes[i].node : NULL;
    return NULL;
}

static CUresult exec_set_kernel(CUgraphExec e, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    unsigned char raw[FK_PARAM_BYTES];
    struct CUgraphNode_st *n = exec_node(e, node, CU_GRAPH_NODE_TYPE_KERNEL);
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = kernel_params(p, raw);
    if (rc) return rc;
    if (n->f != p->func) return CUDA_ERROR_INVALID_VALUE; /* the function stays */
    memcpy(n->raw, raw, sizeof raw);
    return CUDA_SUCCESS;
}

static CUresult exec_set_copy(CUgraphExec e, CUgraphNode node, const CUDA_MEMCPY3D *copy,
                              const CUDA_MEMSET_NODE_PARAMS *set)
{
    struct CUgraphNode_st *n =
        exec_node(e, node, copy ? CU_GRAPH_NODE_TYPE_MEMCPY : CU_GRAPH_NODE_TYPE_MEMSET);
    if (!n || (!copy && !set)) return CUDA_ERROR_INVALID_VALUE;
    if (copy && copy->Depth != 1) return CUDA_ERROR_NOT_SUPPORTED;
    if (copy) n->copy = *copy;
    else n->set = *set;
    return CUDA_SUCCESS;
}

/* cuGraphExecNodeSetParams: the kinds of node the fake has, through their own setters. */
static CUresult exec_set_any(CUgraphExec e, CUgraphNode node, const CUgraphNodeParams *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
        CUDA_KERNEL_NODE_PARAMS v2 = {
            .func = k->func, .gridDimX = k->gridDimX, .gridDimY = k->gridDimY,
            .gridDimZ = k->gridDimZ, .blockDimX = k->blockDimX, .blockDimY = k->blockDimY,
            .blockDimZ = k->blockDimZ, .sharedMemBytes = k->sharedMemBytes,
            .kernelParams = k->kernelParams, .extra = k->extra, .kern = k->kern};
        return exec_set_kernel(e, node, &v2);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return exec_set_copy(e, node, &p->memcpy.copyParams, NULL);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS v1 = {m->dst, m->pitch, m->value, m->elementSize, m->width,
                                      m->height};
        return exec_set_copy(e, node, NULL, &v1);
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Runs one node of an executable graph (kernel, memcpy or memset). */
static CUresult node_run(const struct CUgraphNode_st *n)
{
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return fk_kernel_run(n->f, n->grid, n->block, n->raw);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return fk_copy_3d(&n->copy);
    default: return fk_memset_node(&n->set);
    }
}

static CUresult exec_launch(CUgraphExec e, CUstream s)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    struct CUgraphExec_st *x = exec_find(e);
    struct CUgraph_st *capturing = NULL;
    if (!x || !fk_stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    if ((rc = fk_capture_graph(s, &capturing))) return rc;
    if (capturing) return CUDA_ERROR_NOT_SUPPORTED; /* graphs in graphs: not in the fake */
    for (size_t i = 0; !rc && i < x->n; i++)
        rc = node_run(&x->nodes[i].node);
    return rc;
}

static CUresult exec_destroy(CUgraphExec e)
{
    struct CUgraphExec_st **pe = &g_execs;
    while (*pe && *pe != e) pe = &(*pe)->next;
    if (!e || !*pe) return CUDA_ERROR_INVALID_VALUE;
    *pe = e->next;
    free(e->nodes);
    free(e);
    return CUDA_SUCCESS;
}

/* ---- capture ---- */

static struct fk_capture *capture_of(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return NULL;
    for (struct fk_capture *c = g_captures; c; c = c->next)
        if (c->s == s) return c;
    return NULL;
}

static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode)
{
    CUresult rc = fk_need_ctx();
    if (rc) return rc;
    if (!fk_stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (capture_of(s)) return CUDA_ERROR_ILLEGAL_STATE;
    struct fk_capture *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    if ((rc = graph_new(&c->g, 1))) return free(c), rc;
    c->s = s;
    c->mode = mode;
    c->thread = pthread_self();
    c->next = g_captures;
    g_captures = c;
    return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream s, CUgraph *pg)
{
    struct fk_capture *c = capture_of(s), **pc = &g_captures;
    if (!pg) return CUDA_ERROR_INVALID_VALUE;
    if (!c) return CUDA_ERROR_ILLEGAL_STATE;
    while (*pc != c) pc = &(*pc)->next;
    *pc = c->next;
    CUgraph g = c->g;
    int invalidated = c->invalidated;
    free(c);
    if (invalidated) {
        graph_destroy(g);
        *pg = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *pg = g;
    return CUDA_SUCCESS;
}

static CUresult is_capturing(CUstream s, CUstreamCaptureStatus *status)
{
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    struct fk_capture *c = capture_of(s);
    *status = !c                ? CU_STREAM_CAPTURE_STATUS_NONE
              : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

CUresult fk_capture_graph(CUstream s, struct CUgraph_st **g)
{
    struct fk_capture *c = capture_of(s);
    *g = c ? c->g : NULL;
    return c && c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult fk_graph_add_kernel(struct CUgraph_st *g, CUfunction f, const unsigned grid[3],
                             const unsigned block[3], unsigned shared, const unsigned char *raw)
{
    struct CUgraphNode_st *n = kernel_node(f, grid, block, shared, raw);
    return n ? graph_append(g, n) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fk_capture_sync_conflict(CUstream s)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct fk_capture *c = g_captures; c; c = c->next) {
        int conflict = s ? c->s == s
                         : c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
                               (c->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                                pthread_equal(c->thread, pthread_self()));
        if (conflict) {
            c->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

/* ---- the exported driver API ---- */

__typeof__(cuStreamBeginCapture_v2) cuStreamBeginCapture_v2_ptsz;
__typeof__(cuStreamEndCapture) cuStreamEndCapture_ptsz;
__typeof__(cuStreamIsCapturing) cuStreamIsCapturing_ptsz;
__typeof__(cuGraphLaunch) cuGraphLaunch_ptsz;
__typeof__(cuGraphInstantiateWithParams) cuGraphInstantiateWithParams_ptsz;

static CUresult instantiate_with_params(CUgraphExec *pe, CUgraph g,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(pe, g);
    p->result_out = rc ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
    FK_CALL(cuStreamBeginCapture, 1, begin_capture(hStream, mode))
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
    FK_CALL(cuStreamBeginCapture, 1, begin_capture(hStream, mode))
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
    FK_CALL(cuStreamEndCapture, 1, end_capture(hStream, phGraph))
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
    FK_CALL(cuStreamEndCapture, 1, end_capture(hStream, phGraph))
CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
    FK_CALL(cuStreamIsCapturing, 1, is_capturing(hStream, captureStatus))
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
    FK_CALL(cuStreamIsCapturing, 1, is_capturing(hStream, captureStatus))
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
    FK_CALL(cuGraphCreate, 1, !phGraph || flags ? CUDA_ERROR_INVALID_VALUE : graph_new(phGraph, 1))
CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS *nodeParams)
    FK_CALL(cuGraphAddKernelNode, 1,
            ((void)dependencies, (void)numDependencies,
             add_kernel_node(phGraphNode, hGraph, nodeParams)))
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUgraph childGraph)
    FK_CALL(cuGraphAddChildGraphNode, 1,
            ((void)dependencies, (void)numDependencies,
             add_child_node(phGraphNode, hGraph, childGraph)))
CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
    FK_CALL(cuGraphGetNodes, 1, get_nodes(hGraph, nodes, numNodes))
CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
    FK_CALL(cuGraphNodeGetType, 1, node_type(hNode, type))
CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS *nodeParams)
    FK_CALL(cuGraphKernelNodeGetParams, 1, kernel_node_params(hNode, nodeParams))
CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
    FK_CALL(cuGraphAddMemcpyNode, 1,
            ((void)dependencies, (void)numDependencies, (void)ctx,
             add_copy_node(phGraphNode, hGraph, CU_GRAPH_NODE_TYPE_MEMCPY, copyParams, NULL)))
CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
    FK_CALL(cuGraphAddMemsetNode, 1,
            ((void)dependencies, (void)numDependencies, (void)ctx,
             add_copy_node(phGraphNode, hGraph, CU_GRAPH_NODE_TYPE_MEMSET, NULL, memsetParams)))
CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
    FK_CALL(cuGraphMemcpyNodeGetParams, 1,
            nodeParams ? copy_node_params(hNode, nodeParams, NULL) : CUDA_ERROR_INVALID_VALUE)
CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                            CUDA_MEMSET_NODE_PARAMS *nodeParams)
    FK_CALL(cuGraphMemsetNodeGetParams, 1, copy_node_params(hNode, NULL, nodeParams))
CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
    FK_CALL(cuGraphChildGraphNodeGetGraph, 1, child_graph(hNode, phGraph))
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
    FK_CALL(cuGraphInstantiateWithFlags, 1,
            flags ? CUDA_ERROR_INVALID_VALUE : instantiate(phGraphExec, hGraph))
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
    FK_CALL(cuGraphInstantiateWithParams, 1,
            instantiate_with_params(phGraphExec, hGraph, instantiateParams))
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
    FK_CALL(cuGraphInstantiateWithParams, 1,
            instantiate_with_params(phGraphExec, hGraph, instantiateParams))
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                      CUgraphExecUpdateResultInfo *resultInfo)
    FK_CALL(cuGraphExecUpdate, 1, exec_update(hGraphExec, hGraph, resultInfo))
CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
    FK_CALL(cuGraphExecKernelNodeSetParams, 1, exec_set_kernel(hGraphExec, hNode, nodeParams))
CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
    FK_CALL(cuGraphExecMemcpyNodeSetParams, 1,
            ((void)ctx, copyParams ? exec_set_copy(hGraphExec, hNode, copyParams, NULL)
                                   : CUDA_ERROR_INVALID_VALUE))
CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx)
    FK_CALL(cuGraphExecMemsetNodeSetParams, 1,
            ((void)ctx, exec_set_copy(hGraphExec, hNode, NULL, memsetParams)))
CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                          CUgraphNodeParams *nodeParams)
    FK_CALL(cuGraphExecNodeSetParams, 1, exec_set_any(hGraphExec, hNode, nodeParams))
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
    FK_CALL(cuGraphLaunch, 1, exec_launch(hGraphExec, hStream))
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
    FK_CALL(cuGraphLaunch, 1, exec_launch(hGraphExec, hStream))
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
    FK_CALL(cuGraphExecDestroy, 1, exec_destroy(hGraphExec))
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) FK_CALL(cuGraphDestroy, 1, graph_destroy(hGraph))
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                           const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                           size_t numDependencies)
    FK_CALL(cuGraphAddDependencies, 1, add_edges(hGraph, from, to, edgeData, numDependencies))
