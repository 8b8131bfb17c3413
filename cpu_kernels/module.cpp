// The Python module: one extension for all of the engine's CPU kernels.
#include <torch/extension.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
#ifdef HEADSTART_AMX
  m.def("q4_matmul", &headstart::q4_matmul, "x @ W.T for W in packed Q4 blocks (1-16 bf16 rows)",
        py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("offsets"),
        py::arg("float_out") = false);
  m.def("q8_matmul", &headstart::q8_matmul, "x @ W.T for W in packed Q8 blocks (1-16 bf16 rows)",
        py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("float_out") = false);
  m.def("amx_ready", &headstart::request_amx, "ask Linux for AMX tile state; False if refused");
  m.attr("max_rows") = headstart::kGroupQuantMaxRows;
  m.attr("variant") = "amx";
#else
  m.def("q4_vnni_matmul", &headstart::q4_vnni_matmul,
        "x @ W.T for W in VNNI Q4 blocks (1-16 bf16 rows)", py::arg("x"), py::arg("blocks"),
        py::arg("n"), py::arg("float_out") = false);
  m.def("q8_vnni_matmul", &headstart::q8_vnni_matmul,
        "x @ W.T for W in VNNI Q8 blocks (1-16 bf16 rows)", py::arg("x"), py::arg("blocks"),
        py::arg("n"), py::arg("float_out") = false);
  m.attr("max_rows") = headstart::kGroupQuantMaxRows;
  m.attr("variant") = "avx512";
#endif
  m.def("decode_layers", &headstart::decode_layers, "every decoder layer of a decode step",
        py::call_guard<py::gil_scoped_release>());  // arrivals are noted meanwhile
  m.def("rms_norm", &headstart::rms_norm, "RMSNorm of bf16 rows");
  m.def("add_rms_norm_", &headstart::add_rms_norm_, "x += delta in place, then RMSNorm of x");
  m.def("rope_", &headstart::rope_, "rotate q and k heads in place");
  m.def("silu_mul", &headstart::silu_mul, "silu(gate) * up");
  m.def("paged_decode_attention", &headstart::paged_decode_attention,
        "write the new K/V, then attend one query per sequence over the paged cache");
  m.def("paged_prefill_attention", &headstart::paged_prefill_attention,
        "write a prefill chunk's K/V, then attend it causally over its sequence's paged cache");
  m.def("int8_linear", &headstart::int8_linear, "x @ W.T, x quantised per row, W int8 per channel",
        py::arg("x"), py::arg("weight_t"), py::arg("weight_scales"), py::arg("bias") = py::none(),
        py::arg("smooth") = py::none(), py::arg("outlier_cols") = py::none(),
        py::arg("outlier_weight") = py::none());
  m.def("quantize_rows", &headstart::quantize_rows, "bf16 rows -> (int8 rows, float scales)",
        py::arg("x"), py::arg("smooth") = py::none());
}
