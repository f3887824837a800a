"""Where a bundle's ONNX graphs and FAISS indexes run: `cpu` or `cuda[:N]`.

Asking for CUDA is checked up front and again after each graph or index is placed: onnxruntime quietly
falls back to the CPU provider when the CUDA one cannot start (missing cuDNN, no device), and a
service that was told to use a GPU must refuse to start instead of serving ten times slower.

What moves to the GPU: the ONNX encoder (CUDA execution provider, TensorRT first when asked for) and the
XR level-1 FAISS shortlist. What stays on the CPU: the tree's rankers (the compiled sparse engine scores a
beam of a few hundred sparse rows in ~0.3 ms per text, less than one host-device round trip plus the
sparse kernels would cost) and LightXML's label scoring (a gather of beam × cluster-size dot products).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from xtag.models.errors import XtagError

CUDA_PROVIDER, TENSORRT_PROVIDER, CPU_PROVIDER = (
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "CPUExecutionProvider",
)
GPU_EXTRA_HINT = "install the GPU build: pip install 'xtag[gpu]' (onnxruntime-gpu, faiss-gpu) on a CUDA 12 machine"
_SPEC = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class RuntimeOptions(BaseModel):
    """How a bundle's graphs run, beside where (Device): passed down to load_bundle by whoever read the settings
    (the service's Settings, XTAG_ENCODER_THREADS and XTAG_TENSORRT_CACHE; the CLI builds the same Settings), since
    models/ reads no environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    encoder_threads: int = Field(0, ge=0)  # onnxruntime intra-op threads per encoder session; 0: xtag.models.threads'
    tensorrt_cache: str | None = None  # a folder that keeps TensorRT engines between starts; None: rebuilt each time


class Device(BaseModel):
    """A parsed device spec; `tensorrt` puts onnxruntime's TensorRT provider before the CUDA one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["cpu", "cuda"] = "cpu"
    index: int = Field(0, ge=0)
    tensorrt: bool = False

    @classmethod
    def parse(cls, spec: str | Device | None, tensorrt: bool = False) -> Device:
        """`cpu`, `cuda` or `cuda:N` (None: cpu); raises XtagError for anything else."""
        if isinstance(spec, Device):
            return spec
        match = _SPEC.match((spec or "cpu").strip().lower())
        if match is None or (match.group(1) == "cpu" and match.group(2) not in (None, "0")):
            raise XtagError(f"device {spec!r}: expected cpu, cuda or cuda:N")
        if tensorrt and match.group(1) == "cpu":
            raise XtagError("TensorRT needs a CUDA device (--device cuda)")
        return cls(kind=match.group(1), index=int(match.group(2) or 0), tensorrt=tensorrt)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        return "cpu" if not self.is_cuda else f"cuda:{self.index}"

    def providers(self, trt_cache: str | None = None) -> list:
        """onnxruntime's provider list for this device, checked against what the installed build offers."""
        if not self.is_cuda:
            return [CPU_PROVIDER]
        import onnxruntime as ort

        available = ort.get_available_providers()
        if CUDA_PROVIDER not in available:
            raise XtagError(
                f"device {self}: onnxruntime {ort.__version__} has no CUDA provider (it offers "
                f"{', '.join(available)}); {GPU_EXTRA_HINT}"
            )
        cuda = (CUDA_PROVIDER, {"device_id": self.index, "arena_extend_strategy": "kSameAsRequested"})
        if not self.tensorrt:
            return [cuda, CPU_PROVIDER]
        if TENSORRT_PROVIDER not in available:
            raise XtagError(
                f"device {self}: TensorRT was asked for, but this onnxruntime build has no TensorRT provider"
            )
        trt = {"device_id": self.index, "trt_engine_cache_enable": bool(trt_cache), "trt_fp16_enable": True}
        if trt_cache:
            trt["trt_engine_cache_path"] = trt_cache
        return [(TENSORRT_PROVIDER, trt), cuda, CPU_PROVIDER]

    def check_session(self, session, what: str) -> None:
        """Refuse a session that onnxruntime silently put on the CPU although a GPU was asked for."""
        if not self.is_cuda:
            return
        wanted = TENSORRT_PROVIDER if self.tensorrt else CUDA_PROVIDER
        got = session.get_providers()
        if wanted not in got:
            raise XtagError(
                f"{what}: onnxruntime could not start {wanted} on {self} (the session has {', '.join(got)}); "
                f"refusing to serve from the CPU: check the CUDA/cuDNN libraries and nvidia-smi"
            )

    def faiss_index(self, index):
        """`index` on this device: (index, resources to keep alive, placement text). HNSW graphs do not run on
        faiss-gpu, so on CUDA an HNSW index is searched exactly by a flat GPU index over its stored vectors."""
        if not self.is_cuda:
            return index, None, "cpu"
        import faiss

        if not hasattr(faiss, "StandardGpuResources"):
            raise XtagError(f"device {self}: the installed faiss has no GPU support; {GPU_EXTRA_HINT}")
        if faiss.get_num_gpus() <= self.index:
            raise XtagError(f"device {self}: faiss sees {faiss.get_num_gpus()} GPU(s)")
        source, placement = faiss.downcast_index(index), f"faiss-gpu:{self.index}"
        if isinstance(source, faiss.IndexHNSW):
            source, placement = faiss.downcast_index(source.storage), placement + " (flat, exact: HNSW is CPU-only)"
        resources = faiss.StandardGpuResources()
        return faiss.index_cpu_to_gpu(resources, self.index, source), resources, placement


CPU = Device()
