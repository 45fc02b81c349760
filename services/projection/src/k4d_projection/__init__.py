"""Kinema4D projection: exact ray-cast robot depth, pointmaps, masks, link ids, normals and
shaded robot renders from link poses and a camera; pointmap codecs."""
