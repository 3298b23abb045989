package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// Load reads the checkpoint in dir, checking everything before it returns:
// the files against the manifest's sizes and checksums, the configuration,
// the name, shape and finiteness of every weight and moment, and the
// state. The returned Model is built from the saved configuration with the
// saved weights. If dir is missing but a save was interrupted between
// moving the old checkpoint aside and moving the new one in, Load reads
// the old one.
//
// The weights and moments are read once, front to back, from their files
// into the tensors that keep them, through the checksum: loading takes the
// memory of the model and its optimizer state and little more, however
// large they are. Everything their headers say is checked before the
// model is built; their data is checked against the checksum as it is
// read, and a checkpoint that does not verify is an error, never a model.
func Load(dir string) (*Checkpoint, error) {
	c, err := load(dir, true)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return c, nil
}

// LoadModel is Load without the optimizer state, for a model to be used
// rather than trained on: the optimizer's file is verified as Load
// verifies it (its size and checksum, its moments' names and shapes, its
// step), but its values are not kept, nor checked for being finite, and
// Optimizer is nil.
func LoadModel(dir string) (*Checkpoint, error) {
	c, err := load(dir, false)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return c, nil
}

func load(dir string, optimizer bool) (*Checkpoint, error) {
	src := dir
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(backupPath(dir), manifestFile)); err == nil {
			src = backupPath(dir)
		}
	}
	man, err := readManifest(src)
	if err != nil {
		return nil, err
	}
	// The small files whole, verified; the tensors' files as streams.
	files := make(map[string][]byte, len(man.Files))
	sums := make(map[string]fileSum, len(man.Files))
	for _, s := range man.Files {
		sums[s.Name] = s
		if s.Name == weightsFile || s.Name == optimizerFile {
			continue
		}
		if files[s.Name], err = readVerified(src, s); err != nil {
			return nil, err
		}
	}

	var cfg configJSON
	if err := decodeJSON(files[configFile], &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configFile, err)
	}
	if err := cfg.Model.Validate(); err != nil {
		return nil, fmt.Errorf("%s: model: %w", configFile, err)
	}
	var st stateJSON
	if err := decodeJSON(files[stateFile], &st); err != nil {
		return nil, fmt.Errorf("%s: %w", stateFile, err)
	}
	switch {
	case st.Version != Version:
		return nil, fmt.Errorf("%s: format version %d, this program reads version %d", stateFile, st.Version, Version)
	case st.Step < 0 || st.Tokens < 0 || st.Seconds < 0:
		return nil, fmt.Errorf("%s: negative step, tokens or seconds", stateFile)
	}

	// The weights' header first: their file bounds what they can hold,
	// and the configuration is checked against them before the model it
	// describes is built.
	weights, err := openTensors(src, sums[weightsFile])
	if err != nil {
		return nil, err
	}
	defer weights.close()
	if err := checkSizes(cfg.Model, weights.f, sums[weightsFile].Size); err != nil {
		return nil, weights.check(fmt.Errorf("%s does not fit the model of %s: %w", weightsFile, configFile, err))
	}
	m, err := model.NewEmpty(cfg.Model) // every parameter is read below
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configFile, err)
	}
	params := m.Params()
	if err := checkWeights(weights.f, params); err != nil {
		return nil, weights.check(fmt.Errorf("%s does not fit the model of %s: %w", weightsFile, configFile, err))
	}
	var moments *tensorFile
	if s, ok := sums[optimizerFile]; ok {
		if moments, err = openTensors(src, s); err != nil {
			return nil, err
		}
		defer moments.close()
		shapes := map[string][]int{}
		for _, t := range moments.f.Tensors() {
			if t.DType != "F32" {
				return nil, moments.check(fmt.Errorf("%s: tensor %q has dtype %s, a checkpoint's are F32", optimizerFile, t.Name, t.DType))
			}
			shapes[t.Name] = t.Shape
		}
		if err := checkMoments(shapes, params); err != nil {
			return nil, moments.check(fmt.Errorf("%s: %w", optimizerFile, err))
		}
		if step := moments.f.Metadata()["step"]; step != strconv.Itoa(st.Step) {
			return nil, moments.check(fmt.Errorf("%s is of step %q, %s of step %d", optimizerFile, step, stateFile, st.Step))
		}
	}

	// Everything the headers say is checked: read the data.
	byName := make(map[string]*tensor.Tensor, len(params))
	for _, p := range params {
		byName[p.Name] = p.Value
	}
	if err := weights.read(byName); err != nil {
		return nil, err
	}
	for _, p := range params {
		if err := p.Value.CheckFinite("tensor " + p.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", weightsFile, err)
		}
	}
	c := &Checkpoint{Model: m, Train: cfg.Train, State: st.State, TokenizerJSON: files[tokenizerFile]}
	for _, name := range ModelFiles {
		if b, ok := files[name]; ok {
			if c.Files == nil {
				c.Files = map[string][]byte{}
			}
			c.Files[name] = b
		}
	}
	if moments != nil {
		if !optimizer {
			if err := moments.verify(); err != nil {
				return nil, err
			}
		} else {
			opt := map[string]*tensor.Tensor{}
			for _, t := range moments.f.Tensors() {
				opt[t.Name] = tensor.New(t.Shape...) // of a parameter's shape, checked above
			}
			if err := moments.read(opt); err != nil {
				return nil, err
			}
			for _, key := range sortedKeys(opt) {
				if err := opt[key].CheckFinite(key); err != nil {
					return nil, fmt.Errorf("%s: %w", optimizerFile, err)
				}
			}
			c.Optimizer = opt
		}
	}
	m.SetStep(st.Step)
	return c, nil
}

// tensorFile is a safetensors file of a checkpoint opened to be read
// once, through its checksum.
type tensorFile struct {
	r *hashReader
	f *safetensors.File
}

// openTensors opens the safetensors file that s describes in dir and
// reads its header.
func openTensors(dir string, s fileSum) (*tensorFile, error) {
	r, err := openHashed(dir, s)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.NewFile(r, s.Size)
	if err != nil {
		err = r.check(fmt.Errorf("%s: %w", s.Name, err))
		r.close()
		return nil, err
	}
	return &tensorFile{r, f}, nil
}

func (t *tensorFile) close() { t.r.close() }

// check returns err, or the file's failure to verify if it does not.
func (t *tensorFile) check(err error) error { return t.r.check(err) }

// verify reads the rest of the file through its checksum and checks it.
func (t *tensorFile) verify() error { return t.r.verify() }

// read reads every tensor of the file into the tensor of its name in
// into, which has its shape, in the order of the file, and verifies the
// file's checksum.
func (t *tensorFile) read(into map[string]*tensor.Tensor) error {
	for _, info := range t.f.Tensors() {
		if err := t.f.ReadFloat32(info.Name, into[info.Name].Data); err != nil {
			return t.check(fmt.Errorf("%s: %w", t.r.sum.Name, err))
		}
	}
	return t.verify()
}

// checkWeights checks that the weights file f holds an F32 tensor of the
// right shape for every parameter, and nothing else.
func checkWeights(f *safetensors.File, params []*nn.Param) error {
	names := make(map[string]bool, len(params))
	for _, p := range params {
		names[p.Name] = true
		t, ok := f.Lookup(p.Name)
		switch {
		case !ok:
			return fmt.Errorf("no tensor %q", p.Name)
		case t.DType != "F32":
			return fmt.Errorf("tensor %q has dtype %s, a checkpoint's are F32", p.Name, t.DType)
		case !slices.Equal(t.Shape, p.Value.Shape):
			return fmt.Errorf("tensor %q has shape %v, the model needs %v", p.Name, t.Shape, p.Value.Shape)
		}
	}
	for _, t := range f.Tensors() {
		if !names[t.Name] {
			return fmt.Errorf("tensor %q is no parameter of the model", t.Name)
		}
	}
	return nil
}
