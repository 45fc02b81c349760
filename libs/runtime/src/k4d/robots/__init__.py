"""Robot descriptions, shared by kinematics, projection and the data engine (issue 9
point 11): URDF/xacro parsing (`urdf`, `resources`), the kinematic model with its link
meshes (`model`), the builtin robots and description loading (`descriptions`), uploaded
robot bundles and their registry (`bundles`, `registry`), forward kinematics (`fk`),
joint and pose validation (`validation`) and the RobotRef proto -> model lookup
(`proto`). Rotations and rigid transforms are `k4d.rotations`.

Pure numpy (xacro for .xacro files, example-robot-data / rtb-data for the builtin robots:
the runtime's `robots` extra). Nothing here imports a service package.
"""
