import os

os.environ.setdefault("MUJOCO_GL", "osmesa")  # before anything imports mujoco
