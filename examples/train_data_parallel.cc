// Data-parallel training of a small libtorch MLP on a synthetic task that it
// can learn: a fixed random "teacher" network labels random inputs, and the
// student learns to reproduce its labels. No downloads.
//
// Every replica starts from the same weights, takes its share of each global
// batch, and the gradients are summed over all replicas with one all-reduce
// per step, so N replicas follow exactly the path a single process would on
// the whole batch (up to float rounding).
//
//   Alone (the reference: one replica, the whole batch):
//     ./build/bin/train_data_parallel
//   One process per device (PyTorch/XLA style):
//     shoal launch --per-device -- ./build/bin/train_data_parallel
//   One process per host driving all its devices, one thread per device,
//   reduced inside the host first (JAX style):
//     shoal launch --per-host -- ./build/bin/train_data_parallel
//
// Flags: --steps N (300), --global-batch B (256), --lr X (0.1),
//        --seed S (1), --log-every K (50), --hidden H (256 units),
//        --save FILE (raw float32 weights of rank 0 after training).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/api.h"
#include "shoal/collective.h"
#include "shoal/collective_torch.h"

namespace {

constexpr int kInputs = 32;
constexpr int kTeacherHidden = 64;
constexpr int kClasses = 8;
constexpr int kTrainSamples = 16384;
constexpr int kTestSamples = 4096;

struct Flags {
  int steps = 300;
  int global_batch = 256;
  double lr = 0.1;
  int seed = 1;
  int log_every = 50;
  int hidden = 256;
  std::string save;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") {
      f.steps = std::atoi(next());
    } else if (a == "--global-batch") {
      f.global_batch = std::atoi(next());
    } else if (a == "--lr") {
      f.lr = std::atof(next());
    } else if (a == "--seed") {
      f.seed = std::atoi(next());
    } else if (a == "--log-every") {
      f.log_every = std::atoi(next());
    } else if (a == "--hidden") {
      f.hidden = std::atoi(next());
    } else if (a == "--save") {
      f.save = next();
    } else {
      std::fprintf(stderr,
                   "unknown flag %s (flags: --steps --global-batch --lr "
                   "--seed --log-every --hidden --save)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return f;
}

// The data set: the same on every replica (same generator, same seed).
struct DataSet {
  torch::Tensor train_x, train_y, test_x, test_y;
};

DataSet MakeDataSet() {
  torch::manual_seed(12345);
  torch::Tensor w1 =
      torch::randn({kInputs, kTeacherHidden}) * (0.25 / std::sqrt(kInputs));
  torch::Tensor w2 = torch::randn({kTeacherHidden, kClasses});
  auto label = [&](const torch::Tensor& x) {
    return torch::tanh(x.matmul(w1)).matmul(w2).argmax(1);
  };
  DataSet d;
  d.train_x = torch::randn({kTrainSamples, kInputs});
  d.train_y = label(d.train_x);
  d.test_x = torch::randn({kTestSamples, kInputs});
  d.test_y = label(d.test_x);
  return d;
}

torch::nn::Sequential MakeModel(int seed, int hidden) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(kInputs, hidden),
                               torch::nn::Tanh(),
                               torch::nn::Linear(hidden, kClasses));
}

// One replica: its model, optimizer and place among the replicas.
struct Replica {
  int rank = 0;
  int world = 1;
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::unique_ptr<shoal::collective::Group> group;  // null when alone
};

torch::Tensor FlatParameters(torch::nn::Sequential& model) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : model->parameters()) parts.push_back(p.reshape(-1));
  return torch::cat(parts).detach();
}

// Every replica starts from rank 0's weights (as DistributedDataParallel
// does), whatever its seed.
void BroadcastParameters(Replica& r) {
  torch::NoGradGuard no_grad;
  torch::Tensor flat = FlatParameters(r.model).contiguous();
  shoal::collective::Broadcast(*r.group, flat, /*root=*/0);
  int64_t offset = 0;
  for (auto& p : r.model->parameters()) {
    p.copy_(flat.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
}

// Sums the gradients, and the loss riding along at the end, over every
// replica in one all-reduce of one bucket. Returns the global batch's loss.
double AllReduceGradients(Replica& r, const torch::Tensor& loss) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : r.model->parameters()) {
    parts.push_back(p.grad().reshape(-1));
  }
  parts.push_back(loss.detach().reshape({1}));
  torch::Tensor bucket = torch::cat(parts).contiguous();
  shoal::collective::AllReduce(*r.group, bucket);
  int64_t offset = 0;
  for (auto& p : r.model->parameters()) {
    p.mutable_grad().copy_(bucket.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  return bucket[offset].item<double>();
}

double Accuracy(torch::nn::Sequential& model, const torch::Tensor& x,
                const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  return model->forward(x)
      .argmax(1)
      .eq(y)
      .to(torch::kFloat64)
      .mean()
      .item<double>();
}

struct Outcome {
  double loss = 0;
  double seconds = 0;
};

// The training loop of one replica. Rank 0 prints progress.
Outcome Train(Replica& r, const DataSet& data, const Flags& flags,
              const std::string& label) {
  const int local_batch = flags.global_batch / r.world;
  if (r.group) BroadcastParameters(r);
  auto start = std::chrono::steady_clock::now();
  double loss_value = 0;
  for (int step = 1; step <= flags.steps; ++step) {
    int64_t base =
        (static_cast<int64_t>(step - 1) * flags.global_batch) % kTrainSamples;
    int64_t first = base + static_cast<int64_t>(r.rank) * local_batch;
    torch::Tensor x = data.train_x.narrow(0, first, local_batch);
    torch::Tensor y = data.train_y.narrow(0, first, local_batch);
    r.optimizer->zero_grad();
    // Summed over the local samples and divided by the global batch: the
    // all-reduced sum is the gradient of the global batch's mean loss.
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(
            r.model->forward(x), y,
            torch::nn::functional::CrossEntropyFuncOptions().reduction(
                torch::kSum)) /
        flags.global_batch;
    loss.backward();
    loss_value = r.group ? AllReduceGradients(r, loss) : loss.item<double>();
    r.optimizer->step();
    if (r.rank == 0 && (step % flags.log_every == 0 || step == 1)) {
      std::printf("%s step %4d/%d  loss %.4f\n", label.c_str(), step,
                  flags.steps, loss_value);
      std::fflush(stdout);
    }
  }
  Outcome out;
  out.loss = loss_value;
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return out;
}

void Report(Replica& r, const DataSet& data, const Flags& flags,
            const Outcome& outcome, const std::string& mode) {
  double accuracy = Accuracy(r.model, data.test_x, data.test_y);
  double steps_per_s = flags.steps / outcome.seconds;
  std::printf(
      "RESULT mode=%s replicas=%d steps=%d global_batch=%d final_loss=%.4f "
      "test_accuracy=%.4f steps_per_s=%.1f samples_per_s=%.0f\n",
      mode.c_str(), r.world, flags.steps, flags.global_batch, outcome.loss,
      accuracy, steps_per_s, steps_per_s * flags.global_batch);
  if (!flags.save.empty()) {
    torch::Tensor flat = FlatParameters(r.model).contiguous();
    std::ofstream out(flags.save, std::ios::binary);
    out.write(static_cast<const char*>(flat.data_ptr()),
              flat.numel() * sizeof(float));
  }
}

void Prepare(Replica& r, const Flags& flags) {
  // Every replica gets its own seed; the broadcast from rank 0 makes them
  // equal, as it would for real devices.
  r.model = MakeModel(flags.seed + r.rank, flags.hidden);
  r.optimizer = std::make_unique<torch::optim::SGD>(
      r.model->parameters(), torch::optim::SGDOptions(flags.lr).momentum(0.9));
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string DeviceNote() {
  std::string kind = Env("SHOAL_DEVICE_KIND");
  if (Env("SHOAL_DEVICE_ROOT").empty() || kind.empty()) return "";
  return " (simulated " + kind + " chips: computing on the CPU)";
}

int RunAlone(const Flags& flags) {
  DataSet data = MakeDataSet();
  Replica r;
  Prepare(r, flags);
  std::printf("one replica, the whole batch of %d\n", flags.global_batch);
  Outcome o = Train(r, data, flags, "[alone]");
  Report(r, data, flags, o, "alone");
  return 0;
}

int RunPerDevice(const Flags& flags) {
  Replica r;
  r.rank = std::atoi(Env("SHOAL_RANK").c_str());
  r.world = std::atoi(Env("SHOAL_WORLD_SIZE").c_str());
  if (r.world < 1 || flags.global_batch % r.world != 0) {
    std::fprintf(stderr, "the global batch %d does not split over %d ranks\n",
                 flags.global_batch, r.world);
    return 2;
  }
  DataSet data = MakeDataSet();
  Prepare(r, flags);
  r.group = shoal::collective::Group::Create("train", r.world, r.rank);
  if (r.rank == 0) {
    std::printf(
        "per-device: %d processes, one device each, %d samples each%s "
        "(all-reduce: %s)\n",
        r.world, flags.global_batch / r.world, DeviceNote().c_str(),
        shoal::collective::BackendName(r.group->backend()));
  }
  Outcome o = Train(r, data, flags, "[per-device]");
  if (r.rank == 0) Report(r, data, flags, o, "per-device");
  return 0;
}

int RunPerHost(const Flags& flags) {
  shoal::spmd::ProcessInfo info = shoal::spmd::Initialize();
  int world = info.global_device_count;
  if (world < 1 || flags.global_batch % world != 0) {
    std::fprintf(stderr, "the global batch %d does not split over %d devices\n",
                 flags.global_batch, world);
    return 2;
  }
  DataSet data = MakeDataSet();
  auto groups = shoal::spmd::DeviceGroups("train");
  std::vector<Replica> replicas(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    replicas[i].rank = groups[i]->rank();
    replicas[i].world = groups[i]->world_size();
    replicas[i].group = std::move(groups[i]);
    Prepare(replicas[i], flags);
  }
  if (info.process_id == 0) {
    std::printf(
        "per-host: %d processes x %d devices (one thread each), %d samples "
        "per device%s (all-reduce: %s)\n",
        info.process_count, info.local_device_count, flags.global_batch / world,
        DeviceNote().c_str(),
        shoal::collective::BackendName(replicas[0].group->backend()));
  }
  std::vector<Outcome> outcomes(replicas.size());
  std::vector<std::thread> threads;
  std::exception_ptr failure;
  std::mutex mu;
  for (size_t i = 0; i < replicas.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        outcomes[i] = Train(replicas[i], data, flags, "[per-host]");
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (replicas[i].rank == 0) {
      Report(replicas[i], data, flags, outcomes[i], "per-host");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  // Replicas share this machine's cores: one intra-op thread each.
  torch::set_num_threads(1);
  std::string mode = Env("SHOAL_LAUNCH_MODE");
  try {
    if (mode == "per-device") return RunPerDevice(flags);
    if (mode == "per-host") return RunPerHost(flags);
    return RunAlone(flags);
  } catch (const shoal::Error& e) {
    // No cluster to meet in, a rank that died, a collective that timed out.
    std::fprintf(stderr, "train_data_parallel: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_data_parallel: training failed: %s\n",
                 e.what());
    return 1;
  }
}
