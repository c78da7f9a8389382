"""sinkflex_worker: the sinkflex engine primitives served by PyTorch over a binary socket protocol.

The protocol is described in python/README.md; frames.py encodes it, engine.py holds the model, its
sessions and its optimizer, server.py serves them. This package does not know losses, rollouts or
environments: the loss stays in TypeScript and arrives here as dLoss/dLogprobs.
"""
from .frames import PROTOCOL_VERSION, FrameError, decode_header, encode_frame, read_frame

__all__ = ["PROTOCOL_VERSION", "FrameError", "decode_header", "encode_frame", "read_frame"]
