// trtllm-harness: plays TensorRT-LLM's side of the MOONCAKE cache
// transceiver against libtensorrt_llm_mooncake_wrapper.so, in two
// processes (a context "ctx" and a generation "gen" executor rank), with
// the call sequence of shared/specs/trtllm-agent.md section 5: dlopen the
// wrapper by path, createMooncakeTransferAgent, registerMemory of the
// staging buffers, connection info exchanged, gen loads ctx by connection
// info and sends its request (with its agent descriptor and receive
// buffer) as a sync message, ctx loads gen's descriptor, spins on
// checkRemoteDescs, then per KV handoff: WRITE src -> gen's buffer, wait()
// == kSUCCESS, a sync message after it; gen checks every byte when the
// message arrives and answers. Then a transfer with an attached sync
// message, READs back, and bad input (size mismatch, unknown agent, a
// range past the peer's registration, an unregistered local range).
//
//   trtllm-harness WRAPPER.so [--bench]
//
// Exit status 0 when every check held in both processes; each failure is
// printed with the role. --bench also measures WRITE throughput (64 KiB
// and 1 MiB, one descriptor per submit, as TensorRT-LLM sends) through
// the agent with its default path and with backendParams cma=off (tcp),
// and prints GB/s.
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "mooncake/transfer_engine.h"
#include "trtllm_abi_min.h"

namespace kvc = tensorrt_llm::executor::kv_cache;
using Factory = std::unique_ptr<kvc::BaseTransferAgent> (*)(kvc::BaseAgentConfig const*);

namespace {

const char* role = "parent";
int failures = 0;
constexpr size_t kBuf = 16 << 20;
const size_t kSizes[] = {1, 4096, 65536, 1 << 20, (4 << 20) - 3};

#define CHECK(cond, ...)                                \
  do {                                                  \
    if (!(cond)) {                                      \
      std::fprintf(stderr, "[%s] FAIL %s:%d: ", role, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                \
      std::fprintf(stderr, "\n");                       \
      failures++;                                       \
    }                                                   \
  } while (0)

using Clock = std::chrono::steady_clock;

void fill(unsigned char* p, size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; i++) p[i] = static_cast<unsigned char>(r() >> 56);
}

bool same(const unsigned char* p, size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; i++)
    if (p[i] != static_cast<unsigned char>(r() >> 56)) return false;
  return true;
}

unsigned char* mapped(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
  std::memset(p, 0, n);
  return static_cast<unsigned char*>(p);
}

void writeFile(const std::string& path, const std::string& s) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary) << s;
  std::rename(tmp.c_str(), path.c_str());
}

std::string awaitFile(const std::string& path) {
  auto deadline = Clock::now() + std::chrono::minutes(2);
  while (Clock::now() < deadline) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      return ss.str();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  throw std::runtime_error("no " + path + " after 2 minutes");
}

// Messages: a tag, then little-endian u64 fields.
std::string msg(const std::string& tag, std::initializer_list<uint64_t> fields, const std::string& tail = "") {
  std::string m = tag;
  m.push_back('\0');
  for (uint64_t f : fields) m.append(reinterpret_cast<const char*>(&f), 8);
  return m + tail;
}

uint64_t field(const std::string& m, size_t i) {
  uint64_t v = 0;
  size_t off = m.find('\0') + 1 + 8 * i;
  if (off + 8 <= m.size()) std::memcpy(&v, m.data() + off, 8);
  return v;
}

std::string tagOf(const std::string& m) { return m.substr(0, m.find('\0')); }

// nextFrom polls getNotifiedSyncMessages until a message from `from`
// arrives (bounded); other senders' messages are kept for later calls.
std::string nextFrom(kvc::BaseTransferAgent& a, const std::string& from) {
  static std::unordered_map<std::string, std::vector<std::string>> pending;
  auto deadline = Clock::now() + std::chrono::minutes(2);
  while (Clock::now() < deadline) {
    auto& q = pending[from];
    if (!q.empty()) {
      std::string m = q.front();
      q.erase(q.begin());
      return m;
    }
    for (auto& [name, ms] : a.getNotifiedSyncMessages())
      for (auto& m : ms) pending[name].push_back(m);
    if (pending[from].empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  throw std::runtime_error("no sync message from " + from + " in 2 minutes");
}

std::unique_ptr<kvc::BaseTransferAgent> make(Factory f, const std::string& name, bool tcp = false) {
  kvc::BaseAgentConfig c{name, true, false, true, false, {}};
  c.backendParams["ip_addr"] = "127.0.0.1";
  if (tcp) c.backendParams["cma"] = "off";
  return f(&c);
}

// Te is our raw transfer engine's C API (transfer_engine.h), found in the
// libmooncake.so the wrapper loaded: the benchmark's baseline.
struct Te {
  decltype(&mc_te_create) create;
  decltype(&mc_te_register_local_memory) reg;
  decltype(&mc_te_get_local_name) name;
  decltype(&mc_te_open_segment) open;
  decltype(&mc_te_allocate_batch) alloc;
  decltype(&mc_te_submit) submit;
  decltype(&mc_te_wait_batch) wait;
  decltype(&mc_te_free_batch) free;
  decltype(&mc_buf_free) bufFree;
  decltype(&mc_te_destroy) destroy;

  Te() {
    void* h = dlopen("libmooncake.so", RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) throw std::runtime_error("libmooncake.so is not loaded");
    auto sym = [&](const char* n) {
      void* p = dlsym(h, n);
      if (p == nullptr) throw std::runtime_error(std::string("no ") + n);
      return p;
    };
    create = reinterpret_cast<decltype(create)>(sym("mc_te_create"));
    reg = reinterpret_cast<decltype(reg)>(sym("mc_te_register_local_memory"));
    name = reinterpret_cast<decltype(name)>(sym("mc_te_get_local_name"));
    open = reinterpret_cast<decltype(open)>(sym("mc_te_open_segment"));
    alloc = reinterpret_cast<decltype(alloc)>(sym("mc_te_allocate_batch"));
    submit = reinterpret_cast<decltype(submit)>(sym("mc_te_submit"));
    wait = reinterpret_cast<decltype(wait)>(sym("mc_te_wait_batch"));
    free = reinterpret_cast<decltype(free)>(sym("mc_te_free_batch"));
    bufFree = reinterpret_cast<decltype(bufFree)>(sym("mc_buf_free"));
    destroy = reinterpret_cast<decltype(destroy)>(sym("mc_te_destroy"));
  }

  mc_te_engine_t* engine(void* buf, size_t n) {
    mc_te_engine_t* e = nullptr;
    if (create("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 0, &e) != MC_OK) throw std::runtime_error("mc_te_create");
    if (reg(e, buf, n, "cpu:0", 1) != MC_OK) throw std::runtime_error("mc_te_register_local_memory");
    return e;
  }
};

int gen(Factory f, const std::string& dir, bool bench) {
  role = "gen";
  auto a = make(f, "gen");
  unsigned char* recv = mapped(kBuf);
  a->registerMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(recv, kBuf, 0)}));
  a->registerMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(recv, kBuf, 0)}));  // a second manager
  writeFile(dir + "/gen.conn", a->getLocalConnectionInfo());
  std::string ctxConn = awaitFile(dir + "/ctx.conn");
  a->loadRemoteAgent("ctx", ctxConn);
  a->loadRemoteAgent("gen", a->getLocalConnectionInfo());  // its own name: nothing to load
  // The request: our descriptor and receive buffer (binary, several KB).
  std::string desc = a->getLocalAgentDesc().getBackendAgentDesc();
  a->notifySyncMessage("ctx", msg("REQ", {reinterpret_cast<uint64_t>(recv), kBuf, desc.size()}, desc + std::string(4096, '\0')));
  // Self-notification works (TensorRT-LLM's NIXL agent supports it).
  a->notifySyncMessage("gen", std::string("self\0msg", 8));
  CHECK(nextFrom(*a, "gen") == std::string("self\0msg", 8), "self notification");
  for (;;) {
    std::string m = nextFrom(*a, "ctx");
    std::string t = tagOf(m);
    if (t == "BYE") break;
    if (t == "SYNC" || t == "ATT") {
      uint64_t off = field(m, 0), n = field(m, 1), seed = field(m, 2);
      bool ok = off + n <= kBuf && same(recv + off, n, seed);
      CHECK(ok, "%s: %llu bytes at %llu not as written", t.c_str(), (unsigned long long)n, (unsigned long long)off);
      a->notifySyncMessage("ctx", msg("ACK", {ok ? 1u : 0u}, m));
    }
  }
  if (bench) {
    Te te;
    mc_te_engine_t* e = te.engine(recv, kBuf);
    mc_buf_t b{nullptr, 0};
    te.name(e, &b);
    writeFile(dir + "/gen.te", std::string(static_cast<char*>(b.data), b.len));
    te.bufFree(&b);
    std::string m = nextFrom(*a, "ctx");  // the bench's end
    (void)m;
    te.destroy(e);
  }
  a->deregisterMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(recv, kBuf, 0)}));
  a->deregisterMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(recv, kBuf, 0)}));
  a->deregisterMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(recv, kBuf, 0)}));  // unknown: ignored
  return failures == 0 ? 0 : 1;
}

kvc::TransferState run(kvc::BaseTransferAgent& a, kvc::TransferOp op, void* src, uint64_t dst, size_t n,
                       std::optional<std::string> att = std::nullopt) {
  kvc::TransferRequest r(op, kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(src, n, 0)}),
                         kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(dst, n, 0)}), "gen", att);
  auto st = a.submitTransferRequests(r);
  auto s = st->wait(120000);
  CHECK(st->isCompleted(), "isCompleted after wait");
#if MCGO_TRTLLM_GEN >= 3
  if (s != kvc::TransferState::kSUCCESS) CHECK(!st->getLastStatusStr().empty(), "a failure says why");
  CHECK(st->release(), "release");
#endif
  return s;
}

void benchOne(Factory f, const std::string& label, kvc::BaseTransferAgent& a, unsigned char* send, uint64_t base) {
  for (size_t n : {size_t(64) << 10, size_t(1) << 20}) {
    int iters = n < (1 << 20) ? 400 : 100;
    for (int i = 0; i < 5; i++) run(a, kvc::TransferOp::kWRITE, send, base, n);
    auto t0 = Clock::now();
    for (int i = 0; i < iters; i++) run(a, kvc::TransferOp::kWRITE, send, base + (i % 8) * n, n);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("BENCH %s %zu %.4f\n", label.c_str(), n, double(n) * iters / s / 1e9);
  }
  (void)f;
}

int ctx(Factory f, const std::string& dir, bool bench) {
  role = "ctx";
  auto a = make(f, "ctx");
  unsigned char* send = mapped(kBuf);
  unsigned char* unreg = mapped(1 << 20);
  a->registerMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(send, kBuf, 0)}));
  writeFile(dir + "/ctx.conn", a->getLocalConnectionInfo());
  std::string req = nextFrom(*a, "gen");
  CHECK(tagOf(req) == "REQ", "first message from gen is its request");
  uint64_t base = field(req, 0), len = field(req, 1), dlen = field(req, 2);
  std::string desc = req.substr(req.find('\0') + 1 + 24, dlen);
  CHECK(req.size() == 4 + 24 + dlen + 4096, "the request arrived whole (%zu bytes)", req.size());
  a->loadRemoteAgent("gen", kvc::AgentDesc(desc));
  auto deadline = Clock::now() + std::chrono::minutes(2);
  kvc::MemoryDescs whole(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(base, len, 0)});
  while (!a->checkRemoteDescs("gen", whole) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(a->checkRemoteDescs("gen", whole), "checkRemoteDescs on gen's buffer");
  CHECK(!a->checkRemoteDescs("gen", kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(base + len - 10, 100, 0)})),
        "checkRemoteDescs past gen's buffer");
  CHECK(!a->checkRemoteDescs("nobody", whole), "checkRemoteDescs of an unknown agent");

  // KV handoffs: WRITE, wait, then the sync message; gen checks and acks.
  uint64_t off = 0, seed = 1000;
  for (size_t n : kSizes) {
    fill(send, n, seed);
    CHECK(run(*a, kvc::TransferOp::kWRITE, send, base + off, n) == kvc::TransferState::kSUCCESS, "write %zu", n);
    std::string s = msg("SYNC", {off, n, seed});
    a->notifySyncMessage("gen", s);
    std::string ack = nextFrom(*a, "gen");
    CHECK(tagOf(ack) == "ACK" && field(ack, 0) == 1 && ack.substr(4 + 8) == s, "ack of %zu", n);
    off += n + 4096;
    seed++;
  }
  // An attached sync message arrives after the data.
  fill(send, 300000, 77);
  std::string att = msg("ATT", {off, 300000, 77});
  CHECK(run(*a, kvc::TransferOp::kWRITE, send, base + off, 300000, att) == kvc::TransferState::kSUCCESS, "attached write");
  std::string ack = nextFrom(*a, "gen");
  CHECK(tagOf(ack) == "ACK" && field(ack, 0) == 1 && ack.substr(4 + 8) == att, "ack of the attached message");
  // READ back what the first handoffs wrote.
  std::memset(send, 0, kBuf);
  off = 0;
  seed = 1000;
  for (size_t n : kSizes) {
    CHECK(run(*a, kvc::TransferOp::kREAD, send, base + off, n) == kvc::TransferState::kSUCCESS, "read %zu", n);
    CHECK(same(send, n, seed), "read %zu bytes back", n);
    off += n + 4096;
    seed++;
  }
  // Bad input: exceptions for what the call can tell, kFAILURE for what
  // only the target can; nothing crashes and the agent keeps working.
  bool threw = false;
  try {
    a->submitTransferRequests(kvc::TransferRequest(kvc::TransferOp::kWRITE,
                                                   kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(send, 100, 0)}),
                                                   kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(base, 99, 0)}), "gen"));
  } catch (const std::runtime_error& e) {
    threw = std::strstr(e.what(), "src is 100 bytes, dst 99") != nullptr;
  }
  CHECK(threw, "size mismatch throws, naming the sizes");
  threw = false;
  try {
    a->submitTransferRequests(kvc::TransferRequest(kvc::TransferOp::kWRITE,
                                                   kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(send, 100, 0)}),
                                                   kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(base, 100, 0)}), "nobody"));
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw, "an unknown agent throws");
  threw = false;
  try {
    run(*a, kvc::TransferOp::kWRITE, unreg, base, 4096);
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw, "an unregistered local range throws");
  CHECK(run(*a, kvc::TransferOp::kWRITE, send, base + len - 100, 4096) == kvc::TransferState::kFAILURE,
        "a range past gen's registration fails");
  threw = false;
  try {
    a->notifySyncMessage("nobody", "x");
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw, "a message to an unknown agent throws");
  fill(send, 4096, 5);
  CHECK(run(*a, kvc::TransferOp::kWRITE, send, base, 4096) == kvc::TransferState::kSUCCESS, "a write after the errors");
  a->notifySyncMessage("gen", msg("SYNC", {0, 4096, 5}));
  ack = nextFrom(*a, "gen");
  CHECK(field(ack, 0) == 1, "ack after the errors");
  a->invalidateRemoteAgent("nobody");  // unknown: fine
  a->notifySyncMessage("gen", msg("BYE", {}));
  if (bench) {
    benchOne(f, "agent", *a, send, base);
    auto t = make(f, "ctx-tcp", true);
    t->registerMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(unreg, 1 << 20, 0)}));
    // The tcp agent writes from its own registration into gen's buffer.
    t->loadRemoteAgent("gen", kvc::AgentDesc(desc));
    for (size_t n : {size_t(64) << 10, size_t(1) << 20}) {
      int iters = n < (1 << 20) ? 400 : 100;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; i++) {
        kvc::TransferRequest r(kvc::TransferOp::kWRITE, kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(unreg, n, 0)}),
                               kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(base + (i % 8) * n, n, 0)}), "gen");
        auto st = t->submitTransferRequests(r);
        CHECK(st->wait(120000) == kvc::TransferState::kSUCCESS, "tcp bench write");
      }
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("BENCH agent-tcp %zu %.4f\n", n, double(n) * iters / s / 1e9);
    }
    // Our raw transfer engine, same bytes, same one request per submit.
    Te te;
    mc_te_engine_t* e = te.engine(unreg, 1 << 20);
    int32_t seg = -1;
    CHECK(te.open(e, awaitFile(dir + "/gen.te").c_str(), &seg) == MC_OK, "mc_te_open_segment");
    for (size_t n : {size_t(64) << 10, size_t(1) << 20}) {
      int iters = n < (1 << 20) ? 400 : 100;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; i++) {
        uint64_t batch = 0;
        te.alloc(e, 1, &batch);
        mc_te_request_t r{MC_TE_OPCODE_WRITE, unreg, seg, base + (i % 8) * n, n};
        te.submit(e, batch, &r, 1);
        mc_te_status_t st{};
        te.wait(e, batch, 120000, &st);
        CHECK(st.status == MC_TE_STATUS_COMPLETED, "raw engine write");
        te.free(e, batch);
      }
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("BENCH engine-tcp %zu %.4f\n", n, double(n) * iters / s / 1e9);
    }
    te.destroy(e);
    std::fflush(stdout);
    a->notifySyncMessage("gen", msg("END", {}));
  }
  a->deregisterMemory(kvc::MemoryDescs(kvc::MemoryType::kDRAM, {kvc::MemoryDesc(send, kBuf, 0)}));
  return failures == 0 ? 0 : 1;
}

int child(const char* wrapper, const std::string& which, const std::string& dir, bool bench) {
  try {
    void* h = dlopen(wrapper, RTLD_LAZY);
    if (h == nullptr) {
      std::fprintf(stderr, "[%s] dlopen %s: %s\n", which.c_str(), wrapper, dlerror());
      return 2;
    }
    auto f = reinterpret_cast<Factory>(dlsym(h, "createMooncakeTransferAgent"));
    if (f == nullptr) {
      std::fprintf(stderr, "[%s] createMooncakeTransferAgent function is not open correctly.\n", which.c_str());
      return 2;
    }
    return which == "gen" ? gen(f, dir, bench) : ctx(f, dir, bench);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[%s] FAIL: exception: %s\n", which.c_str(), e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s WRAPPER.so [--bench]\n", argv[0]);
    return 2;
  }
  bool bench = argc > 2 && std::string(argv[2]) == "--bench";
  char tmpl[] = "/tmp/trtllm-harness-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  // Fork before anything loads the Go runtime: each child dlopens the
  // wrapper itself, as each TensorRT-LLM rank does.
  pid_t pids[2];
  const char* roles[2] = {"gen", "ctx"};
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      alarm(300);  // a hung child ends the run instead of CI
      std::fflush(stdout);
      _exit(child(argv[1], roles[i], dir, bench));
    }
  }
  int rc = 0;
  for (int i = 0; i < 2; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    std::printf("%s: %s\n", roles[i], ok ? "ok" : "FAILED");
    if (!ok) {
      rc = 1;
      if (WIFSIGNALED(st)) std::printf("%s: killed by signal %d\n", roles[i], WTERMSIG(st));
    }
  }
  std::string cleanup = "rm -rf " + dir;
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return rc;
}
