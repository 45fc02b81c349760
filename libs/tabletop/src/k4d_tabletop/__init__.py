"""The synthetic tabletop domain shared by the data engine and the policy evaluator: scenes
(`scene`), scripted tasks and their physics judge (`tasks`), and MuJoCo physics of a scene
with the robot's links as mocap bodies (`physics`). Moved here from k4d_datagen (issue 18)
so that a second service can run the same scenes without importing the data engine; the
data engine's old module names are aliases of these modules."""
