"""Methods turn a question and its history into the memory block the answer model reads.

Each is one small module behind `Method.build(question, history, ctx) -> MemoryBlock`; configs in
conf/method/ instantiate them.
"""
