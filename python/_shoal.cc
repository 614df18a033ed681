// _shoal: the native half of the Python frontend (docs/design/python.md).
// A thin binding of the C++ runtime: joining a cluster, raw-byte objects
// (put_pieces copies each piece once into shared memory; get maps objects
// without a copy), wait,
// and the cluster's resources. The `shoal` package builds Ray's API on it.
//
// Every call that may block releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/driver_init.h"
#include "shoal/api.h"

namespace py = pybind11;

namespace {

using BufferRef = shoal::ObjectRef<shoal::Buffer>;

// The bytes of a stored object, mapped where they lie: the node's shared
// memory for a large object. While this (or a memoryview of it) lives, the
// object stays pinned.
struct StoredBytes {
  shoal::Buffer buffer;
};

void Init(const std::string& address, const std::string& token,
          const std::string& temp_dir, double num_cpus,
          const std::map<std::string, double>& resources,
          const std::string& cluster_program) {
  shoal::InitOptions options;
  options.address = address;
  options.token = token;
  options.temp_dir = temp_dir;
  options.num_cpus = num_cpus;
  options.resources = resources;
  shoal::internal::DriverProgram program;
  program.cluster_program = cluster_program;
  program.workers_run_this_program = false;
  py::gil_scoped_release release;
  shoal::internal::InitDriver(options, program);
}

// Stores an object of `size` bytes made of (offset, buffer) pieces, each
// copied once (straight into shared memory when the object is large).
BufferRef PutPieces(const std::vector<std::pair<size_t, py::buffer>>& pieces,
                    size_t size) {
  std::vector<py::buffer_info> infos;
  std::vector<shoal::internal::BufferPiece> parts;
  infos.reserve(pieces.size());
  for (const auto& [offset, buffer] : pieces) {
    infos.push_back(buffer.request());
    const py::buffer_info& info = infos.back();
    if (info.ndim > 1 && info.strides.back() != info.itemsize) {
      throw py::value_error("put: the buffers must be contiguous");
    }
    parts.push_back(
        {offset,
         std::string_view(static_cast<const char*>(info.ptr),
                          static_cast<size_t>(info.size * info.itemsize))});
  }
  py::gil_scoped_release release;
  return BufferRef(shoal::internal::PutPieces(parts, size));
}

std::vector<StoredBytes> Get(const std::vector<BufferRef>& refs,
                             int64_t timeout_ms) {
  py::gil_scoped_release release;
  std::vector<StoredBytes> out;
  out.reserve(refs.size());
  for (const BufferRef& ref : refs) {
    out.push_back({shoal::Get(ref, timeout_ms)});
  }
  return out;
}

std::vector<size_t> Wait(const std::vector<BufferRef>& refs, size_t num_returns,
                         int64_t timeout_ms) {
  std::vector<const shoal::internal::RefHandle*> handles;
  handles.reserve(refs.size());
  for (const BufferRef& ref : refs) handles.push_back(ref.handle().get());
  py::gil_scoped_release release;
  return shoal::internal::WaitReady(handles, num_returns, timeout_ms);
}

py::dict NodeDict(const shoal::NodeInfo& n) {
  py::dict d;
  d["NodeID"] = n.node_id;
  d["Address"] = n.address;
  d["NodeManagerHostname"] = n.hostname;
  d["Alive"] = n.alive;
  d["IsHeadNode"] = n.is_head_node;
  d["Resources"] = n.total;
  d["Available"] = n.available;
  d["Labels"] = n.labels;
  return d;
}

}  // namespace

PYBIND11_MODULE(_shoal, m) {
  m.doc() = "The native half of the shoal package (docs/design/python.md).";

  auto error =
      py::register_exception<shoal::Error>(m, "ShoalError", PyExc_RuntimeError);
  py::register_exception<shoal::TimeoutError>(m, "GetTimeoutError",
                                              error.ptr());
  py::register_exception<shoal::ObjectLostError>(m, "ObjectLostError",
                                                 error.ptr());

  py::class_<BufferRef>(m, "ObjectRef")
      .def("hex", &BufferRef::id, "The object's id.")
      .def("__repr__",
           [](const BufferRef& r) { return "ObjectRef(" + r.id() + ")"; })
      .def("__eq__", [](const BufferRef& a,
                        const BufferRef& b) { return a.id() == b.id(); })
      .def("__hash__",
           [](const BufferRef& r) { return py::hash(py::str(r.id())); });

  py::class_<StoredBytes>(m, "StoredBytes", py::buffer_protocol())
      .def_buffer([](const StoredBytes& s) {
        return py::buffer_info(const_cast<uint8_t*>(s.buffer.data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(s.buffer.size())}, {1},
                               /*readonly=*/true);
      })
      .def("__len__", [](const StoredBytes& s) { return s.buffer.size(); });

  m.def("init", &Init, py::arg("address"), py::arg("token"),
        py::arg("temp_dir"), py::arg("num_cpus"), py::arg("resources"),
        py::arg("cluster_program"));
  m.def(
      "shutdown",
      [] {
        py::gil_scoped_release release;
        shoal::Shutdown();
      },
      "Leaves the cluster (and stops the local one Init started).");
  m.def("is_initialized", &shoal::IsInitialized);
  m.def("put_pieces", &PutPieces, py::arg("pieces"), py::arg("size"),
        "Stores an object made of (offset, buffer) pieces, copied once.");
  m.def("get", &Get, py::arg("refs"), py::arg("timeout_ms"),
        "The objects' bytes, mapped without a copy.");
  m.def("wait", &Wait, py::arg("refs"), py::arg("num_returns"),
        py::arg("timeout_ms"), "The indices of the refs that are ready.");
  m.def("cluster_resources", [] {
    py::gil_scoped_release release;
    return shoal::ClusterResources();
  });
  m.def("available_resources", [] {
    py::gil_scoped_release release;
    return shoal::AvailableResources();
  });
  m.def("nodes", [] {
    std::vector<shoal::NodeInfo> nodes;
    {
      py::gil_scoped_release release;
      nodes = shoal::Nodes();
    }
    py::list out;
    for (const auto& n : nodes) out.append(NodeDict(n));
    return out;
  });
}
