"""Runtime: the engine over the C core, the sampler, model profiles and the one generation
loop. Imports text and the layers below, never the API or the front ends."""
