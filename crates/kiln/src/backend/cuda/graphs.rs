//! Short launches through one-node CUDA graphs. Launching an instantiated graph after giving
//! its kernel node the call's parameters costs the host less than `cuLaunchKernel`: on the H100
//! machines measured (driver 580, 100 000 launches of a 1-block kernel, `cuGraphExecKernelNode
//! SetParams` + `cuGraphLaunch`), 1.9–2.2 µs against 2.8–3.4 µs for parameter blocks of 64 to
//! 368 bytes, and a cached `MetalKernel` call went from 4.7–5.0 to 3.4–4.2 µs. Changing the node's
//! grid at each launch made it dearer than a plain launch, so each launch shape (function, grid,
//! block, dynamic shared memory) gets its own graph.
//!
//! A kernel launched through a graph also took more device time in the benchmarks: 0.3 µs on
//! 16384 rows of 1024 bf16 (rms_norm 0.0276 against 0.0272–0.0273 ms), 0.8 µs on scatter_add's
//! 132 blocks of 1024 threads (0.2011 against 0.2002–0.2004 ms), 6–14 µs on the persistent
//! attention prefill (D = 64 causal 0.626–0.628 against 0.614–0.621 ms). That matters for
//! kernels that keep the GPU busy, not for short ones, whose cost is the host's: only launches
//! of at most 8192 threads and at most one threadgroup per multiprocessor go through graphs.
//!
//! The first launch of a shape goes through `cuLaunchKernel` (which also validates it); the
//! second instantiates the shape's graph, and later ones reuse it. Updating a node's parameters
//! affects only later launches of the graph, never one already queued, so the launches of one
//! graph keep their own arguments without any wait. A shape whose graph cannot be made is
//! launched directly from then on.

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::{result as drv, sys, CudaFunction, DriverError};
use rustc_hash::FxHashMap;

use super::CudaBackend;

/// Most launch shapes remembered; later shapes are launched directly.
const MAX_SHAPES: usize = 4096;
/// Most graphs instantiated.
const MAX_GRAPHS: usize = 512;
/// Most threads of a launch that goes through a graph.
const MAX_GRAPH_THREADS: u64 = 8192;

/// One launch shape.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct LaunchShape {
    func: usize,
    groups: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
}

enum Slot {
    /// Launched once, directly.
    Seen,
    Ready(OneNodeGraph),
    /// Its graph could not be made: launched directly.
    Direct,
}

/// An instantiated graph of one kernel node.
struct OneNodeGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: sys::CUDA_KERNEL_NODE_PARAMS,
    /// Keeps the function's module loaded while the graph refers to it.
    _function: CudaFunction,
}

// SAFETY: the handles are plain driver handles of one context, usable from any thread; every
// use goes through the table's lock, so no two threads touch one graph at once.
unsafe impl Send for OneNodeGraph {}

impl Drop for OneNodeGraph {
    fn drop(&mut self) {
        // SAFETY: the handles were made by this value (the executable one may be missing when
        // instantiation failed) and are destroyed once, here; the driver finishes launches
        // already queued before it releases an executable graph.
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            sys::cuGraphDestroy(self.graph);
        }
    }
}

impl OneNodeGraph {
    /// A graph of one node launching `function` with `params` (copied at the call).
    fn new(function: &CudaFunction, shape: LaunchShape, params: *mut *mut c_void) -> Result<Self, DriverError> {
        let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: function.cu_function(),
            gridDimX: shape.groups[0],
            gridDimY: shape.groups[1],
            gridDimZ: shape.groups[2],
            blockDimX: shape.block[0],
            blockDimY: shape.block[1],
            blockDimZ: shape.block[2],
            sharedMemBytes: shape.shared_bytes,
            kernelParams: params,
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: `graph` is valid for writes; the context is bound by the caller.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
        let mut made = OneNodeGraph {
            graph,
            exec: std::ptr::null_mut(),
            node: std::ptr::null_mut(),
            params: node_params,
            _function: function.clone(),
        };
        // SAFETY: `made.graph` is live, the node has no dependencies, and `node_params` points
        // at the function and at parameters the driver copies before returning.
        unsafe { sys::cuGraphAddKernelNode_v2(&mut made.node, made.graph, std::ptr::null(), 0, &node_params) }
            .result()?;
        // SAFETY: `made.exec` is valid for writes and `made.graph` holds one complete node.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut made.exec, made.graph, 0) }.result()?;
        Ok(made)
    }

    /// Gives the node the parameters of the next launch.
    fn set_params(&mut self, params: *mut *mut c_void) -> Result<(), DriverError> {
        self.params.kernelParams = params;
        // SAFETY: the node belongs to this executable graph and keeps its function and shape;
        // the driver copies the parameters before returning, and the change applies only to
        // launches queued after it.
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, self.node, &self.params) }.result()
    }

    /// Queues one launch on `stream`.
    fn launch(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        // SAFETY: the executable graph is live and `stream` belongs to its context.
        unsafe { sys::cuGraphLaunch(self.exec, stream) }.result()
    }
}

/// The driver functions the graph path calls (the `_v2` ones since CUDA 12.3).
const GRAPH_FUNCTIONS: [&str; 7] = [
    "cuGraphCreate",
    "cuGraphAddKernelNode_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// The launch shapes seen by one backend and their graphs.
pub(super) struct GraphLaunches {
    /// Whether the driver has the graph functions; without them every launch is direct.
    enabled: bool,
    table: Mutex<(FxHashMap<LaunchShape, Slot>, usize)>,
}

/// What [`GraphLaunches::launch`] did.
enum Launched {
    /// Queued through a graph.
    Queued,
    /// Not handled: launch directly.
    Direct,
}

impl GraphLaunches {
    pub fn new() -> Self {
        GraphLaunches { enabled: super::libs::driver_exports(&GRAPH_FUNCTIONS), table: Mutex::default() }
    }

    /// Queues `function` with `params` through the graph of its launch shape when the shape was
    /// launched before; otherwise asks the caller to launch it directly. An error is the
    /// driver's answer to the graph launch itself.
    fn launch(
        &self,
        function: &CudaFunction,
        groups: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        stream: sys::CUstream,
        params: *mut *mut c_void,
    ) -> Result<Launched, DriverError> {
        if !self.enabled {
            return Ok(Launched::Direct);
        }
        let shape = LaunchShape { func: function.cu_function() as usize, groups, block, shared_bytes };
        let Ok(mut guard) = self.table.lock() else {
            return Ok(Launched::Direct);
        };
        let (table, graphs) = &mut *guard;
        let Some(slot) = table.get_mut(&shape) else {
            if table.len() < MAX_SHAPES {
                table.insert(shape, Slot::Seen);
            }
            return Ok(Launched::Direct);
        };
        if let Slot::Seen = slot {
            let made = if *graphs < MAX_GRAPHS { OneNodeGraph::new(function, shape, params).ok() } else { None };
            *slot = match made {
                Some(g) => {
                    *graphs += 1;
                    Slot::Ready(g)
                }
                None => Slot::Direct,
            };
            // A graph just made holds this launch's parameters already.
            if let Slot::Ready(graph) = slot {
                return graph.launch(stream).map(|()| Launched::Queued);
            }
        }
        let Slot::Ready(graph) = slot else {
            return Ok(Launched::Direct);
        };
        if graph.set_params(params).is_err() {
            // The direct launch reports whatever is wrong.
            *slot = Slot::Direct;
            return Ok(Launched::Direct);
        }
        graph.launch(stream).map(|()| Launched::Queued)
    }
}

impl CudaBackend {
    /// Queues one launch of `function` on the backend's stream: through the graph of its launch
    /// shape when the launch is short (at most `MAX_GRAPH_THREADS` threads and one threadgroup
    /// per multiprocessor), else directly.
    ///
    /// # Safety
    /// `params` holds one pointer per parameter of `function`, in order, each to storage of that
    /// parameter's size, and every address passed in them stays valid until the kernel ends.
    pub(super) unsafe fn queue_launch(
        &self,
        function: &CudaFunction,
        groups: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract, on the backend's own stream.
        unsafe { self.queue_launch_on(self.stream.cu_stream(), function, groups, block, shared_bytes, params) }
    }

    /// As [`Self::queue_launch`], on `stream` (the backend's own or a caller's of this device).
    ///
    /// # Safety
    /// As [`Self::queue_launch`]; `stream` is a live stream of this backend's context.
    pub(super) unsafe fn queue_launch_on(
        &self,
        stream: sys::CUstream,
        function: &CudaFunction,
        groups: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        let groups_total: u64 = groups.iter().map(|&g| g as u64).product();
        let threads = groups_total * block.iter().map(|&b| b as u64).product::<u64>();
        if groups_total <= self.multiprocessors() as u64 && threads <= MAX_GRAPH_THREADS {
            let by_graph = self.graphs.launch(function, groups, block, shared_bytes, stream, params.as_mut_ptr())?;
            if let Launched::Queued = by_graph {
                return Ok(());
            }
        }
        // SAFETY: the caller's contract covers `params`; the stream belongs to this backend.
        unsafe {
            drv::launch_kernel(
                function.cu_function(),
                (groups[0], groups[1], groups[2]),
                (block[0], block[1], block[2]),
                shared_bytes,
                stream,
                params,
            )
        }
    }
}
