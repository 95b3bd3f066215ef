// Runs a SavedModel's signatures the way tensorflow_model_server does: TensorFlow's C++
// `LoadSavedModel` (the graph, then its restore op) and `Session::Run` on each signature's
// tensor names, with TensorFlow Text's op libraries loaded first (the server links them in).
// Built and driven by tests/export/loaders.py.
//
// usage: saved_model_runner EXPORT_DIR REQUEST_DIR OUT_DIR [OP_LIBRARY.so ...]
//   REQUEST_DIR/<signature>/<input>.pb  one serialized TensorProto per input of the signature
//   OUT_DIR/<signature>/<output>.pb     written for every output of every requested signature
// Exits 1 with TensorFlow's message on stderr when anything fails.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/platform/env.h"

namespace fs = std::filesystem;

namespace {

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) {
    std::cerr << what << ": " << status.ToString() << std::endl;
    std::exit(1);
  }
}

std::string ReadFile(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

tensorflow::Tensor ReadTensor(const fs::path& path) {
  tensorflow::TensorProto proto;
  tensorflow::Tensor tensor;
  if (!proto.ParseFromString(ReadFile(path)) || !tensor.FromProto(proto)) {
    std::cerr << path << ": not a serialized TensorProto" << std::endl;
    std::exit(1);
  }
  return tensor;
}

void WriteTensor(const tensorflow::Tensor& tensor, const fs::path& path) {
  tensorflow::TensorProto proto;
  tensor.AsProtoField(&proto);
  std::ofstream(path, std::ios::binary) << proto.SerializeAsString();
}

// Feeds REQUEST_DIR/<signature>/ to `signature`, writes its outputs to OUT_DIR/<signature>/.
void RunSignature(tensorflow::SavedModelBundle& bundle, const std::string& name,
                  const fs::path& request, const fs::path& out) {
  const auto& signatures = bundle.meta_graph_def.signature_def();
  auto found = signatures.find(name);
  if (found == signatures.end()) {
    std::cerr << "no signature " << name << std::endl;
    std::exit(1);
  }
  const tensorflow::SignatureDef& signature = found->second;
  std::vector<std::pair<std::string, tensorflow::Tensor>> feeds;
  for (const auto& [input, info] : signature.inputs()) {
    feeds.emplace_back(info.name(), ReadTensor(request / (input + ".pb")));
  }
  std::vector<std::string> keys, fetches;
  for (const auto& [output, info] : signature.outputs()) {
    keys.push_back(output);
    fetches.push_back(info.name());
  }
  std::vector<tensorflow::Tensor> results;
  Check(bundle.session->Run(feeds, fetches, {}, &results), "Session::Run " + name);
  fs::create_directories(out);
  for (size_t i = 0; i < keys.size(); ++i) WriteTensor(results[i], out / (keys[i] + ".pb"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " EXPORT_DIR REQUEST_DIR OUT_DIR [OP_LIBRARY.so ...]"
              << std::endl;
    return 2;
  }
  for (int i = 4; i < argc; ++i) {
    void* handle = nullptr;
    Check(tensorflow::Env::Default()->LoadDynamicLibrary(argv[i], &handle), argv[i]);
  }
  tensorflow::SavedModelBundle bundle;
  Check(tensorflow::LoadSavedModel(tensorflow::SessionOptions(), tensorflow::RunOptions(),
                                   argv[1], {"serve"}, &bundle),
        "LoadSavedModel");
  for (const auto& entry : fs::directory_iterator(argv[2])) {
    std::string name = entry.path().filename().string();
    RunSignature(bundle, name, entry.path(), fs::path(argv[3]) / name);
  }
  return 0;
}
