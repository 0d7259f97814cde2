"""The runtimes an agent runs instances with (`--runtime`)."""
from .base import Runtime
from .docker import DockerRuntime
from .process import ProcessRuntime

RUNTIMES = {runtime.name: runtime for runtime in (DockerRuntime, ProcessRuntime)}

__all__ = ["RUNTIMES", "DockerRuntime", "ProcessRuntime", "Runtime"]
